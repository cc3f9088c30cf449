"""Recall and store through MCP at 10,000, 100,000 and 1,000,000 memories (issue 20 item 4).

``nice -n 10 python -m benches.million [--sizes 10000,100000,1000000] [--rounds 150]
[--stores 40] [--four] [--profile SECONDS]``

The corpora of `benches/million_corpus.py` (natural vocabulary, 384-d hashing vectors, index
files built; cached, built on first use). For each size a private copy of the database and its
index files (recall writes recall counts) is served by its own stdio server (`python -m
cpersona`, `CPERSONA_EMBEDDING_MODE=hashing`, the start-up calibration off: issue 20 item 3 is
measured elsewhere), reached through the MCP SDK's client as a real client reaches it. Then:

1. first recall after a restart: spawn to `initialize` answered, then the first `recall` (the
   index files are current: what every later session of a store pays);
2. rounds: every server in turn (the order rotating, so the shared machine's load falls on all
   alike) answers one trivial call (`get_profile`) and one `recall` (limit 10) of a query that
   no earlier call has sent (`million_corpus.queries`: 6-8 Zipf-weighted words, most of them
   rare); server share = recall minus the trivial call, at p50 and p95;
3. `store` calls, interleaved the same way (the hashing embedder: ~0.5 ms of embedding), each
   right after a trivial call: `store_paired_share` summarises store minus that call;
4. resident memory (/proc/<pid>/status) of each server; with ``--four``, three more servers on
   the largest size's copy, one recall each, and the resident memory of all four.

``--profile SECONDS`` instead attaches ``py-spy record --native -r 200`` to the largest size's
server for that many seconds of back-to-back recalls (the SVG and a speedscope JSON land in the
cache directory) and prints the per-stage timings the server logged (CPERSONA_LOG_LEVEL=debug).
Results are printed as JSON and appended to ``$CPERSONA_BENCH_OUT`` when set.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import anyio
from mcp import Client, StdioServerParameters

from benches import million_corpus as mc

AGENT = mc.AGENT


def _params(db: Path, log: Path | None = None) -> StdioServerParameters:
    return server_params({"CPERSONA_DB_PATH": str(db)}, db.parent, log)


def server_params(
    database: dict[str, str], cwd: Path, log: Path | None = None
) -> StdioServerParameters:
    """A stdio server on the hashing embedder, start-up calibration off, on the database that
    `database` names (CPERSONA_DB_PATH or CPERSONA_DATABASE_URL, and its cache directory);
    with `log`, its debug log appended there."""
    env = {
        **database,
        "CPERSONA_EMBEDDING_MODE": "hashing",
        "CPERSONA_CALIBRATE_ON_MODEL_CHANGE": "false",
        "PYTHONPATH": os.pathsep.join(
            str(Path(p).resolve()) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p
        ),
    }
    command, args = sys.executable, ["-m", "cpersona"]
    if log is not None:  # the log is on stderr, which the SDK's client passes through
        env["CPERSONA_LOG_LEVEL"] = "debug"
        command, args = "/bin/sh", ["-c", f'exec "{sys.executable}" -m cpersona 2>>"{log}"']
    for key in ("CPERSONA_KERNEL", "PATH", "HOME"):
        if key in os.environ:
            env[key] = os.environ[key]
    return StdioServerParameters(command=command, args=args, env=env, cwd=str(cwd))


def _server_pids(db: Path) -> list[int]:
    """Our child processes serving `db` (found through their environment)."""
    me, found = os.getpid(), []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            if ppid != me:
                continue
            with open(f"/proc/{entry}/environ", "rb") as f:
                environ = f.read().split(b"\0")
        except OSError:
            continue
        if f"CPERSONA_DB_PATH={db}".encode() in environ:
            found.append(int(entry))
    return sorted(found)


def _status(pid: int) -> dict[str, float]:
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM", "RssAnon", "RssFile"):
                out[key + "_mb"] = round(int(value.split()[0]) / 1024, 1)
    return out


def _copy(corpus: mc.Corpus, directory: Path) -> Path:
    """A fresh private copy: the database and every file beside it (index files, their
    checksum sidecars); an earlier run's copy, WAL included, is removed first."""
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    for src in corpus.db_path.parent.glob(corpus.db_path.name + "*"):
        if src.suffix != ".json":
            shutil.copyfile(src, directory / src.name)
    return directory / corpus.db_path.name


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _summary(values: list[float]) -> dict[str, float]:
    return {
        "p50": round(statistics.median(values), 2),
        "p95": round(_pct(values, 0.95), 2),
        "iqr": round(_pct(values, 0.75) - _pct(values, 0.25), 2),
        "min": round(min(values), 2),
        "n": len(values),
    }


async def _timed(client: Client, tool: str, args: dict[str, Any]) -> float:
    t0 = time.perf_counter()
    r = await client.call_tool(tool, args)
    elapsed = (time.perf_counter() - t0) * 1e3
    assert not r.is_error, r.content[0].text
    return elapsed


def _recall_args(q: str) -> dict[str, Any]:
    return {"agent_id": AGENT, "query": q, "limit": 10}


def _query_stream(count: int) -> Iterator[str]:
    yield from mc.queries(count)


async def _measure(dbs: dict[int, Path], rounds: int, stores: int, four: bool) -> dict[str, Any]:
    queries = _query_stream((10 + rounds + stores) * len(dbs) + 16)
    out: dict[str, Any] = {str(n): {} for n in dbs}
    async with AsyncExitStack() as stack:
        clients: dict[int, Client] = {}
        for n, db in dbs.items():
            t0 = time.perf_counter()
            client = await stack.enter_async_context(Client(_params(db)))
            t1 = time.perf_counter()
            first = await _timed(client, "recall", _recall_args(next(queries)))
            out[str(n)]["spawn_to_initialized_ms"] = round((t1 - t0) * 1e3, 1)
            out[str(n)]["first_recall_ms"] = round(first, 1)
            out[str(n)]["rss_after_first_recall"] = _status(_server_pids(db)[0])
            clients[n] = client
        for client in clients.values():  # a few recalls each: SQLite's page cache, imports
            for _ in range(5):
                await _timed(client, "recall", _recall_args(next(queries)))
        times: dict[int, dict[str, list[float]]] = {
            n: {"trivial": [], "recall": [], "store": [], "store_trivial": []} for n in dbs
        }
        order = list(dbs)
        for i in range(rounds):
            turn = order[i % len(order) :] + order[: i % len(order)]
            for n in turn:
                times[n]["trivial"].append(
                    await _timed(clients[n], "get_profile", {"agent_id": AGENT})
                )
                times[n]["recall"].append(
                    await _timed(clients[n], "recall", _recall_args(next(queries)))
                )
        for i in range(stores):
            turn = order[i % len(order) :] + order[: i % len(order)]
            for n in turn:
                # Each store right after a trivial call: the pair's difference is the store's
                # server share with the machine's state of that moment.
                times[n]["store_trivial"].append(
                    await _timed(clients[n], "get_profile", {"agent_id": AGENT})
                )
                message = {"id": f"million-{i}", "content": f"{next(queries)} stored {i}"}
                times[n]["store"].append(
                    await _timed(clients[n], "store", {"agent_id": AGENT, "message": message})
                )
        for n, t in times.items():
            share = [r - g for r, g in zip(t["recall"], t["trivial"], strict=True)]
            rec, triv = _summary(t["recall"]), _summary(t["trivial"])
            out[str(n)].update(
                recall=rec,
                trivial=triv,
                server_share_p50=round(rec["p50"] - triv["p50"], 2),
                server_share_p95=round(rec["p95"] - triv["p95"], 2),
                paired_share=_summary(share),
                store=_summary(t["store"]) if t["store"] else None,
                store_paired_share=(
                    _summary([s - g for s, g in zip(t["store"], t["store_trivial"], strict=True)])
                    if t["store"]
                    else None
                ),
                rss_after_rounds=_status(_server_pids(dbs[n])[0]),
            )
        if four:
            largest = max(dbs)
            for _ in range(3):
                extra = await stack.enter_async_context(Client(_params(dbs[largest])))
                await _timed(extra, "recall", _recall_args(next(queries)))
            await _timed(clients[largest], "recall", _recall_args(next(queries)))
            out[str(largest)]["rss_four_processes"] = [
                _status(pid) for pid in _server_pids(dbs[largest])
            ]
    return out


async def _profile(db: Path, seconds: float, target: Path, log: Path) -> dict[str, Any]:
    queries = _query_stream(100_000)
    async with Client(_params(db, log)) as client:
        for _ in range(10):
            await _timed(client, "recall", _recall_args(next(queries)))
        pid = _server_pids(db)[0]
        spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
        base = [spy, "record", "--pid", str(pid), "--native", "-r", "200", "-d", str(int(seconds))]
        procs = [
            subprocess.Popen([*base, "-o", f"{target}.svg"], stdout=subprocess.DEVNULL),
            subprocess.Popen(
                [*base, "-f", "raw", "-o", f"{target}.txt"], stdout=subprocess.DEVNULL
            ),
        ]
        times: list[float] = []
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            times.append(await _timed(client, "recall", _recall_args(next(queries))))
        for p in procs:
            p.wait()
    return {"recall": _summary(times), "stages": stage_summary(log)}


_STAGE = re.compile(r"(\w+)=([0-9.]+)ms")


def stage_summary(log: Path) -> dict[str, dict[str, float]]:
    """p50 / p95 / mean of each stage over the recall calls of a debug log."""
    stages: dict[str, list[float]] = {}
    for line in log.read_text(errors="replace").splitlines():
        if "tool recall " not in line or "vector_scan=" not in line:
            continue
        total = re.search(r"tool recall ([0-9.]+)ms", line)
        found = [(name, float(ms)) for name, ms in _STAGE.findall(line)]
        for name, ms in found:
            stages.setdefault(name, []).append(ms)
        if total:  # the call's time outside every stage: dispatch, bookkeeping, the answer
            stages.setdefault("total", []).append(float(total.group(1)))
            rest = float(total.group(1)) - sum(ms for _, ms in found)
            stages.setdefault("outside_stages", []).append(rest)
    return {
        name: {"p50": round(statistics.median(v), 2), "p95": round(_pct(v, 0.95), 2),
               "mean": round(statistics.fmean(v), 2), "n": len(v)}
        for name, v in stages.items()
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default=",".join(str(n) for n in mc.SIZES))
    parser.add_argument("--rounds", type=int, default=150)
    parser.add_argument("--stores", type=int, default=40)
    parser.add_argument("--four", action="store_true")
    parser.add_argument("--profile", type=float, default=0.0)
    parser.add_argument("--work", default=str(mc.cache_dir() / "work"))
    args = parser.parse_args()
    sizes = [int(x) for x in args.sizes.split(",")]
    work = Path(args.work)
    corpora = {n: mc.corpus(n) for n in sizes}
    dbs = {n: _copy(c, work / str(n)) for n, c in corpora.items()}
    # The copies' dirty pages (4.3 GB at 1M) go to disk before anything is timed: written back
    # during the rounds, they held every store's WAL fsync behind them.
    os.sync()
    load = os.getloadavg()
    started = time.strftime("%H:%M UTC", time.gmtime())
    if args.profile:
        n = max(sizes)
        target = work / f"profile-{n}"
        log = work / f"profile-{n}.log"
        log.unlink(missing_ok=True)
        result: dict[str, Any] = {str(n): anyio.run(_profile, dbs[n], args.profile, target, log)}
    else:
        result = anyio.run(_measure, dbs, args.rounds, args.stores, args.four)
    result["build"] = {str(n): c.info for n, c in corpora.items()}
    result["machine"] = {
        "started": started,
        "load_before": [round(x, 2) for x in load],
        "load_after": [round(x, 2) for x in os.getloadavg()],
    }
    text = json.dumps(result, indent=1)
    print(text)
    out = os.environ.get("CPERSONA_BENCH_OUT")
    if out:
        with open(out, "a") as f:
            f.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    main()
