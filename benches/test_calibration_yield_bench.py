"""Start-up calibration against a caller's recalls (issue 20): how much slower are recalls while
the start-up calibration runs, with it giving way to calls (yielding.py) and without?

A corpus of N memories over four agents (hashing embedder, stored through the tools), then
cycles alternating the two modes: each cycle removes the calibration sidecar, opens an Engine,
starts the calibration and meanwhile makes recalls one after another with a pause between them
(`CPERSONA_BENCH_THINK_MS`, default 20: a busy client), until the calibration ends; then the same
recalls for as long again with nothing running beside them. Recalls run through the tool
handlers inside `engine.activity.call()`, as the server's dispatch runs them.

Run: ``python -m pytest benches/test_calibration_yield_bench.py --benchmark-enable -s``
(``CPERSONA_BENCH_CAL_ROWS`` memories, default 10000; ``CPERSONA_BENCH_CAL_CYCLES`` per mode,
default 3). Without ``--benchmark-enable``: 400 memories, one cycle per mode.
"""

from __future__ import annotations

import os
import random
import statistics
import time
from pathlib import Path
from typing import Any

import pytest
import scale_support as scale
from cpersona.config import Settings
from cpersona.engine import Engine
from cpersona.server.registry import ToolSpec, coerce
from cpersona.server.tools import all_tools

AGENTS = [f"agent{i}" for i in range(4)]
WORDS = [f"w{i}" for i in range(3000)]


def call(engine: Engine, specs: dict[str, ToolSpec], name: str, args: dict[str, Any]) -> Any:
    spec = specs[name]
    with engine.activity.call():
        return spec.handler(engine, coerce(spec, args))


def build(settings: Settings, rows: int) -> None:
    rng = random.Random(7)
    engine = Engine(settings)
    specs = {t.name: t for t in all_tools()}
    try:
        for i in range(rows):
            text = " ".join(rng.choice(WORDS) for _ in range(12))
            message = {"content": text}
            call(engine, specs, "store", {"agent_id": AGENTS[i % 4], "message": message})
    finally:
        engine.close()


def recalls(
    engine: Engine, specs: dict[str, ToolSpec], seconds: float, think: float
) -> list[float]:
    rng = random.Random(11)
    out = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        query = " ".join(rng.choice(WORDS) for _ in range(4))
        start = time.perf_counter()
        call(engine, specs, "recall", {"agent_id": rng.choice(AGENTS), "query": query})
        out.append(time.perf_counter() - start)
        time.sleep(think)
    return out


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1e3


@pytest.mark.timeout(7200)
def test_recall_while_startup_calibration_runs(benchmark, tmp_path: Path, request) -> None:
    full = scale.full_run(request.config)
    rows = int(os.environ.get("CPERSONA_BENCH_CAL_ROWS", "10000")) if full else 400
    cycles = int(os.environ.get("CPERSONA_BENCH_CAL_CYCLES", "3")) if full else 1
    think = float(os.environ.get("CPERSONA_BENCH_THINK_MS", "20")) / 1e3
    cache = scale.cache_dir() / "calibration" if full else tmp_path
    cache.mkdir(parents=True, exist_ok=True)
    db = cache / f"cal-{rows}.db"
    settings = Settings(db_path=str(db), embedding_mode="hashing")
    if not db.exists():
        build(settings, rows)
    specs = {t.name: t for t in all_tools()}
    results: dict[str, dict[str, list[float]]] = {
        mode: {"during": [], "after": [], "run_s": []} for mode in ("gives way", "does not")
    }

    def run() -> None:
        for cycle in range(cycles):
            order = ("gives way", "does not") if cycle % 2 else ("does not", "gives way")
            for mode in order:
                for sidecar in cache.glob(f"{db.name}.calibration.json*"):
                    sidecar.unlink()
                engine = Engine(settings)
                try:
                    recalls(engine, specs, 1.0, think)  # services built, caches warm
                    if mode == "does not":
                        engine.calibrator.activity = None
                    thread = engine.start_calibration()
                    assert thread is not None
                    begun = time.perf_counter()
                    during: list[float] = []
                    while thread.is_alive():
                        during += recalls(engine, specs, 0.2, think)
                    took = time.perf_counter() - begun
                    after = recalls(engine, specs, max(took, 2.0), think)
                finally:
                    engine.close()
                results[mode]["during"] += during
                results[mode]["after"] += after
                results[mode]["run_s"].append(took)

    benchmark.group = "recall during start-up calibration"
    benchmark.pedantic(run, rounds=1, iterations=1)
    print(
        f"\n{rows} memories, 4 agents, think {think * 1e3:.0f} ms, {cycles} cycle(s) per mode, "
        f"load average {os.getloadavg()[0]:.1f}"
    )
    info: dict[str, Any] = {"rows": rows, "think_ms": think * 1e3}
    for mode, r in results.items():
        d, a = r["during"], r["after"]
        line = {
            "calibration_s": [round(x, 1) for x in r["run_s"]],
            "during_p50_ms": round(pct(d, 0.5), 2),
            "during_p95_ms": round(pct(d, 0.95), 2),
            "after_p50_ms": round(pct(a, 0.5), 2),
            "after_p95_ms": round(pct(a, 0.95), 2),
            "p50_ratio": round(statistics.median(d) / statistics.median(a), 3),
            "p95_ratio": round(pct(d, 0.95) / pct(a, 0.95), 3),
            "recalls_during": len(d),
        }
        info[mode] = line
        print(f"  calibration {mode:9s} {line}")
    benchmark.extra_info.update(info)
