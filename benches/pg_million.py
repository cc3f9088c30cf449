"""Recall and store through MCP at 1,000,000 memories on PostgreSQL against SQLite (issue 19).

``nice -n 5 python -m benches.pg_million --url postgresql://.../million [--rounds 100]
[--stores 20] [--work DIR] [--rows N: another cached corpus size, as the tests' toy run]``

The SQLite side is a private copy of the 1M corpus of `benches/million_corpus.py` (natural
vocabulary, 384-d hashing vectors, index files built; `python -m benches.million` builds it)
with its index files. The PostgreSQL side is a database holding the same rows, filled
beforehand with ``cpersona migrate --from <copy of the corpus> --to <url>``; its host-local
index files (vector and full-text) are built in this process before the servers start
(`Engine` on the URL, each index synced until current), so that recall is timed on the files
and not on the pgvector fallback during a background rebuild. Each database is then served by
its own stdio server (`python -m cpersona`, `CPERSONA_EMBEDDING_MODE=hashing`, start-up
calibration off) through the MCP SDK's client. Rounds alternate the two servers (order
rotating): a trivial call (`get_profile`) and a `recall` (limit 10) of a query no earlier call
sent (`million_corpus.queries`); then `--stores` stores each. Printed as JSON: p50 / p95 of
each, the server share (recall minus the trivial call) and PostgreSQL over SQLite.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import anyio
from mcp import Client, StdioServerParameters

from benches import million as mb
from benches import million_corpus as mc
from benches.bench_support import index_files_current


def build_pg_indexes(url: str, cache: Path) -> float:
    """Bring this host's index files of `url` current in `cache`; seconds taken."""
    from cpersona.config import Settings
    from cpersona.engine import Engine

    settings = Settings(
        db_path="", embedding_mode="hashing", database_url=url, cache_dir=str(cache)
    )
    engine = Engine(settings)
    try:
        return index_files_current(engine)
    finally:
        engine.close()


async def _measure(
    servers: dict[str, StdioServerParameters], rounds: int, stores: int
) -> dict[str, Any]:
    queries = mb._query_stream((10 + rounds + stores) * len(servers) + 16)
    out: dict[str, Any] = {name: {} for name in servers}
    async with AsyncExitStack() as stack:
        clients: dict[str, Client] = {}
        for name, params in servers.items():
            clients[name] = await stack.enter_async_context(Client(params))
            first = await mb._timed(clients[name], "recall", mb._recall_args(next(queries)))
            out[name]["first_recall_ms"] = round(first, 1)
        for client in clients.values():  # the page caches, imports
            for _ in range(5):
                await mb._timed(client, "recall", mb._recall_args(next(queries)))
        times: dict[str, dict[str, list[float]]] = {
            n: {"trivial": [], "recall": [], "store": []} for n in servers
        }
        order = list(servers)
        for i in range(rounds):
            for name in order[i % 2 :] + order[: i % 2]:
                times[name]["trivial"].append(
                    await mb._timed(clients[name], "get_profile", {"agent_id": mb.AGENT})
                )
                times[name]["recall"].append(
                    await mb._timed(clients[name], "recall", mb._recall_args(next(queries)))
                )
        for i in range(stores):
            for name in order[i % 2 :] + order[: i % 2]:
                message = {"id": f"pg-million-{i}", "content": f"{next(queries)} stored {i}"}
                times[name]["store"].append(
                    await mb._timed(
                        clients[name], "store", {"agent_id": mb.AGENT, "message": message}
                    )
                )
    for name, t in times.items():
        rec, triv = mb._summary(t["recall"]), mb._summary(t["trivial"])
        out[name].update(
            recall=rec,
            trivial=triv,
            server_share_p50=round(rec["p50"] - triv["p50"], 2),
            server_share_p95=round(rec["p95"] - triv["p95"], 2),
            store=mb._summary(t["store"]) if t["store"] else None,
        )
    pg, lite = out["postgresql"], out["sqlite"]
    out["ratio"] = {
        "recall_p50": round(pg["recall"]["p50"] / lite["recall"]["p50"], 2),
        "recall_p95": round(pg["recall"]["p95"] / lite["recall"]["p95"], 2),
    }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True, help="the PostgreSQL database holding the rows")
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--stores", type=int, default=20)
    parser.add_argument("--work", default="/tmp/cpersona-pg-million", help="the private copies")
    parser.add_argument("--rows", type=int, default=1_000_000, help="which cached corpus")
    args = parser.parse_args()
    rows = args.rows
    path = mc.cache_dir() / f"natural-{rows}x{mc.DIM}-v{mc.CORPUS_VERSION}.db"
    stamp = path.with_name(path.name + ".json")
    if not stamp.exists():  # building it takes 10 minutes and 4 GB: benches.million does
        raise SystemExit(f"{path} is not built: run python -m benches.million first")
    corpus = mc.Corpus(path, rows, json.loads(stamp.read_text()))
    work = Path(args.work)
    cache = work / "pg-cache"
    started = time.perf_counter()
    db = mb._copy(corpus, work / "sqlite")
    os.sync()  # as benches.million: the copy's dirty pages must not hold the stores' fsyncs
    print(f"SQLite copy in {time.perf_counter() - started:.0f} s", flush=True)
    print(f"PostgreSQL index files ready in {build_pg_indexes(args.url, cache):.0f} s", flush=True)
    load0 = os.getloadavg()
    servers = {
        "sqlite": mb.server_params({"CPERSONA_DB_PATH": str(db)}, db.parent),
        "postgresql": mb.server_params(
            {"CPERSONA_DATABASE_URL": args.url, "CPERSONA_CACHE_DIR": str(cache)}, work
        ),
    }
    t0 = time.strftime("%H:%M:%S", time.gmtime())
    result = anyio.run(_measure, servers, args.rounds, args.stores)
    result["utc"] = f"{t0}-{time.strftime('%H:%M:%S', time.gmtime())}"
    result["load_before_after"] = [round(load0[0], 1), round(os.getloadavg()[0], 1)]
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
