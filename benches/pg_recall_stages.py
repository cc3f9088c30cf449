"""Where a recall's time goes on PostgreSQL against SQLite, in one process (issue 19).

    python -m benches.pg_recall_stages [--rows 10000] [--rounds 6] [--per-round 30]

The corpus, copy and servers of benches/pg_latency.py (the SQLite server and the PostgreSQL
one whose vector arm reads this host's index file), a store before each recall as there. For
each backend: the client's wall time and the server's call time (p50), the recall stages
(cpersona.timings, through a metrics observer), and on PostgreSQL every statement of the
recall's thread and of the snapshot threads with its p50 and its time per recall (the BEGIN
with its reads counted as one). Then the round trip of a bare `SELECT 1` back to back and
after 3 ms of idleness, the cost a PostgreSQL round trip pays on a machine whose other core
has gone idle (docs/notes/performance-notes.md, "The snapshot's round trips off the recall's path").
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import sys
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psycopg
from cpersona.engine import Engine
from cpersona.server.app import build_server
from cpersona.storage.pg import connection as pg_connection
from mcp import Client

from benches import pg_latency
from benches import scale_support as scale
from benches.bench_support import timed_tool_call

#: (backend, statement) -> seconds, while a recall runs.
_STATEMENTS: dict[str, list[float]] = defaultdict(list)
_IN_RECALL = threading.Event()


def _instrument() -> None:
    """Time every PgConnection statement (and BEGIN pipeline) run while a recall is timed."""
    run, begin = pg_connection.PgConnection._run, pg_connection.PgConnection.begin

    def timed_run(self: Any, sql: str, params: Any, *, returns_id: bool) -> Any:
        started = time.perf_counter()
        try:
            return run(self, sql, params, returns_id=returns_id)
        finally:
            if _IN_RECALL.is_set():
                _STATEMENTS[" ".join(sql.split())[:48]].append(time.perf_counter() - started)

    def timed_begin(self: Any, sql: str, reads: Sequence[Any] = ()) -> Any:
        started = time.perf_counter()
        try:
            return begin(self, sql, reads)
        finally:
            if _IN_RECALL.is_set():
                _STATEMENTS[f"BEGIN + {len(reads)} reads"].append(time.perf_counter() - started)

    pg_connection.PgConnection._run = timed_run  # type: ignore[method-assign]
    pg_connection.PgConnection.begin = timed_begin  # type: ignore[method-assign]


class _Stages:
    """A metrics observer keeping each recall's stage totals and call time."""

    def __init__(self) -> None:
        self.stages: dict[str, list[float]] = defaultdict(list)
        self.calls: list[float] = []
        self._current: dict[str, float] = defaultdict(float)

    def reset(self) -> None:
        """Forget what was observed (the warm-up calls)."""
        self.stages.clear()
        self.calls.clear()

    def observe_stage(self, name: str, seconds: float) -> None:
        self._current[name] += seconds

    def observe_call(self, name: str, seconds: float, kind: str | None) -> None:
        if name == "recall":
            self.calls.append(seconds)
            for stage, spent in self._current.items():
                self.stages[stage].append(spent)
        self._current = defaultdict(float)


def _ms(values: list[float]) -> float:
    return statistics.median(values) * 1000


async def _measure(engines: dict[str, Engine], args: argparse.Namespace) -> dict[str, Any]:
    observers = {key: _Stages() for key in engines}
    wall: dict[str, list[float]] = defaultdict(list)
    recall = {"agent_id": scale.AGENT, "query": scale.QUERY_TEXT, "limit": 10}
    async with contextlib.AsyncExitStack() as stack:
        clients = {
            key: await stack.enter_async_context(
                Client(build_server(engine, metrics=observers[key]), raise_exceptions=True)
            )
            for key, engine in engines.items()
        }
        for client in clients.values():  # warm
            note = {"agent_id": scale.AGENT, "message": {"content": "warm"}}
            await timed_tool_call(client, "store", note)
            await timed_tool_call(client, "recall", recall)
        for observer in observers.values():
            observer.reset()
        _STATEMENTS.clear()
        for r in range(args.rounds):
            for key in list(clients) if r % 2 == 0 else list(reversed(clients)):
                for i in range(args.per_round):
                    text = f"stage round {r} note {i} on {key}: the harbor crane needs oil"
                    note = {"agent_id": scale.AGENT, "message": {"content": text}}
                    await timed_tool_call(clients[key], "store", note)
                    if key == "postgresql":
                        _IN_RECALL.set()
                    spent, _ = await timed_tool_call(clients[key], "recall", recall)
                    _IN_RECALL.clear()
                    wall[key].append(spent / 1000)
    return {"observers": observers, "wall": wall}


def _idle_round_trips(url: str, rounds: int = 200) -> tuple[float, float]:
    """p50 ms of `SELECT 1` back to back and after 3 ms asleep."""
    with psycopg.connect(url, autocommit=True) as conn:
        out = []
        for pause in (0.0, 0.003):
            times = []
            for _ in range(rounds):
                if pause:
                    time.sleep(pause)
                started = time.perf_counter()
                conn.execute("SELECT 1").fetchall()
                times.append(time.perf_counter() - started)
            out.append(_ms(times))
    return out[0], out[1]


async def main_async(args: argparse.Namespace) -> int:
    _instrument()
    with tempfile.TemporaryDirectory(prefix="pg-stages-") as tmp_name:
        tmp = Path(tmp_name)
        server_url, server = pg_latency._server_url(args.pg_url, tmp / "pg")
        try:
            engines, _ = pg_latency.same_data_engines(args.rows, server_url, tmp, sql_arm=False)
            try:
                got = await _measure(engines, args)
            finally:
                for engine in engines.values():
                    engine.close()
            back_to_back, after_idle = _idle_round_trips(server_url)
        finally:
            if server is not None:
                server.cleanup()
    recalls = len(got["wall"]["postgresql"])
    for key, obs in got["observers"].items():
        print(f"{key}: client wall p50 {_ms(got['wall'][key]):.2f} ms, "
              f"server call p50 {_ms(obs.calls):.2f} ms")  # fmt: skip
        for stage, values in obs.stages.items():
            print(f"  {stage:<16} {_ms(values):7.3f} ms")
    print("postgresql statements during recalls (p50, ms per recall):")
    for name, values in sorted(_STATEMENTS.items(), key=lambda kv: -sum(kv[1])):
        print(f"  {name:<50} {_ms(values):7.3f} {sum(values) * 1000 / recalls:7.3f}")
    print(f"SELECT 1: back to back {back_to_back:.3f} ms, after 3 ms idle {after_idle:.3f} ms")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--per-round", type=int, default=30)
    parser.add_argument("--pg-url", default=None)
    return asyncio.run(main_async(parser.parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
