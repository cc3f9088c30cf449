"""The first minutes on a store CPersona 2.5.12 wrote (issue 33 item 1), beside 2.5.12 itself.

``nice python -m benches.first_minutes [--rows 100000] [--seconds 60] [--json PATH]
[--only-load]``

One run, one after another on private copies of one 2.5.12 database (`legacy_support`:
schema by 2.5.12, the natural-vocabulary texts and 384-d hashing vectors of the million
corpora, no cpersona file beside it), both servers embedding through the same local HTTP
embedding server (`legacy_support.EmbeddingServer`, the hashing embedder) and reached through
the MCP SDK's client as a real client reaches them:

1. ``cpersona``: spawned, then back-to-back `recall` calls (limit 10) for ``--seconds``, each
   a new query from `million_corpus.queries` (the same list, in the same order, for both
   servers), and on until its build has ended. The first call finds no index files and
   starts their background build; the build's end is read from the server's log ("rebuilt
   from the database (N rows, T s)"). ``--only-load`` runs this phase alone.
2. ``2.5.12``: the same, on its own copy.
3. ``idle build``: cpersona on a fresh copy, one recall (which starts the build), then no
   call until both memories files are rebuilt (the same log lines).

Printed: per server, recall p50 / p95 over the first 30 s and over each 10 s window, the time
from spawn to the first answer, and the build's time under back-to-back recalls and idle
(with their ratio, the bound the issue asks: at most 3x). ``--json`` writes it all (with the
per-call times) for benches/plots.py. Timings on a shared 2-core machine are noisy: compare
the columns of one run.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import anyio
from mcp import Client, StdioServerParameters

from benches import legacy_support as legacy
from benches import million_corpus as mc

REBUILT = re.compile(r"(\S+) rebuilt from the database \((\d+) rows, ([\d.]+) s\)")
WINDOW_S = 10.0
#: The longest the cpersona phase recalls on while its build has not ended.
BUILD_CAP_S = 1800.0


def _cpersona_env(db: Path, url: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CPERSONA_")}
    env.update(
        CPERSONA_DB_PATH=str(db),
        CPERSONA_EMBEDDING_MODE="http",
        CPERSONA_EMBEDDING_URL=url,
        CPERSONA_CALIBRATE_ON_MODEL_CHANGE="false",
        CPERSONA_LOG_LEVEL="info",
    )
    return env


def _params(
    env: dict[str, str], cwd: Path, log: Path, python: str = sys.executable
) -> StdioServerParameters:
    # stderr (the log) to a file the bench reads while the server runs.
    command = f'exec "{python}" -m cpersona 2>>"{log}"'
    return StdioServerParameters(command="/bin/sh", args=["-c", command], env=env, cwd=str(cwd))


def _copy(src: Path, directory: Path) -> Path:
    directory.mkdir(parents=True)
    dst = directory / src.name
    shutil.copyfile(src, dst)
    return dst


def _rebuilt(log: Path) -> dict[str, float]:
    """The files the server's log says were rebuilt, with the seconds each took."""
    text = log.read_text(errors="replace") if log.exists() else ""
    return {m.group(1): float(m.group(3)) for m in REBUILT.finditer(text)}


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _summary(values: list[float]) -> dict[str, float]:
    if not values:
        return {"n": 0}
    return {
        "p50": round(statistics.median(values), 1),
        "p95": round(_pct(values, 0.95), 1),
        "n": len(values),
    }


def _both_built(done: dict[str, float]) -> bool:
    return sum(name.endswith((".memories.vec", ".memories.fts")) for name in done) == 2


async def _back_to_back(
    name: str, params: StdioServerParameters, log: Path, queries: list[str], seconds: float
) -> dict[str, Any]:
    """Spawn, then recalls back to back for `seconds` from the spawn (cpersona: and on until
    both memories index files are built, at most `BUILD_CAP_S`); (t, ms) of each."""
    calls: list[tuple[float, float]] = []
    ready_at: dict[str, float] = {}
    async with AsyncExitStack() as stack:
        spawned = time.perf_counter()
        client = await stack.enter_async_context(Client(params))
        initialized = time.perf_counter() - spawned
        for q in queries:
            t0 = time.perf_counter()
            building = name == "cpersona" and not _both_built(ready_at)
            if t0 - spawned >= (BUILD_CAP_S if building else seconds):
                break
            r = await client.call_tool("recall", {"agent_id": mc.AGENT, "query": q, "limit": 10})
            t1 = time.perf_counter()
            assert not r.is_error, r.content[0].text
            calls.append((round(t0 - spawned, 3), round((t1 - t0) * 1e3, 2)))
            for file in _rebuilt(log):
                ready_at.setdefault(file, round(t1 - spawned, 1))
    first_30 = [ms for t, ms in calls if t < 30.0]
    windows = []
    for w in range(int(max(seconds, calls[-1][0] if calls else 0) // WINDOW_S)):
        inside = [ms for t, ms in calls if w * WINDOW_S <= t < (w + 1) * WINDOW_S]
        windows.append({"from_s": w * WINDOW_S, **_summary(inside)})
    out: dict[str, Any] = {
        "server": name,
        "spawn_to_initialized_s": round(initialized, 2),
        "first_recall_ms": calls[0][1] if calls else None,
        "first_30s": _summary(first_30),
        "windows": windows,
        "calls": calls,
    }
    if name == "cpersona":
        out["build_under_load_s"] = _rebuilt(log)
        out["build_done_at_s"] = ready_at
    return out


async def _idle_build(params: StdioServerParameters, log: Path, query: str) -> dict[str, float]:
    """One recall (the build starts), then no call until both memories files are rebuilt."""
    async with Client(params) as client:
        r = await client.call_tool("recall", {"agent_id": mc.AGENT, "query": query, "limit": 10})
        assert not r.is_error, r.content[0].text
        deadline = time.perf_counter() + 1800
        while time.perf_counter() < deadline:
            done = _rebuilt(log)
            if _both_built(done):
                return done
            await anyio.sleep(0.5)
    raise RuntimeError(f"the idle build did not finish; see {log}")


def _memories(build: dict[str, float]) -> float:
    """The memories files' build time: both build at once, so the longer of the two."""
    return max((s for f, s in build.items() if ".memories." in f), default=float("nan"))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--json", type=Path)
    parser.add_argument(
        "--only-load", action="store_true", help="cpersona under back-to-back recalls alone"
    )
    args = parser.parse_args()
    src = legacy.legacy_corpus(args.rows)
    queries = mc.queries(20_000)
    result: dict[str, Any] = {"rows": args.rows, "seconds": args.seconds, "load": os.getloadavg()}
    with legacy.EmbeddingServer() as embed, tempfile.TemporaryDirectory(prefix="cp-first-") as tmp:
        base = Path(tmp)
        db = _copy(src, base / "cpersona")
        log = base / "cpersona.log"
        params = _params(_cpersona_env(db, embed.url), db.parent, log)
        result["cpersona"] = anyio.run(
            _back_to_back, "cpersona", params, log, queries, args.seconds
        )
        if args.only_load:
            build = result["cpersona"]["build_under_load_s"]
            print(f"build under back-to-back recalls: {build}")
            print(f"  done at (s from spawn): {result['cpersona']['build_done_at_s']}")
            if args.json:
                args.json.write_text(json.dumps(result, indent=1))
            return
        db = _copy(src, base / "legacy")
        log = base / "legacy.log"
        env = legacy.legacy_env(db, embed.url)
        params = _params(env, db.parent, log, str(legacy.legacy_python()))
        result["2.5.12"] = anyio.run(_back_to_back, "2.5.12", params, log, queries, args.seconds)
        db = _copy(src, base / "idle")
        log = base / "idle.log"
        params = _params(_cpersona_env(db, embed.url), db.parent, log)
        result["idle_build_s"] = anyio.run(_idle_build, params, log, queries[0])
    loaded, idle = (
        _memories(result["cpersona"]["build_under_load_s"]),
        _memories(result["idle_build_s"]),
    )
    result["build_load_over_idle"] = round(loaded / idle, 2)
    for name in ("cpersona", "2.5.12"):
        r = result[name]
        print(
            f"{name}: initialized {r['spawn_to_initialized_s']} s, first recall "
            f"{r['first_recall_ms']} ms, first 30 s {r['first_30s']}"
        )
        for w in r["windows"]:
            print(f"  {w['from_s']:>4.0f}-{w['from_s'] + WINDOW_S:.0f} s: {w}")
    print(f"build of the memories files: {loaded:.1f} s under back-to-back recalls, "
          f"{idle:.1f} s idle ({result['build_load_over_idle']}x)")  # fmt: skip
    print(f"  done at (s from spawn): {result['cpersona']['build_done_at_s']}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
