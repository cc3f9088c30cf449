"""Recall's server share through MCP: the stdio server with the full-text index against the
same server answering the FTS arms with FTS5 (`CPERSONA_FTS_INDEX=false`).

The corpora of test_fts_bench.py (common-word sentences), every row embedded by the hashing
embedder (384-d, the server's `CPERSONA_EMBEDDING_MODE=hashing`), copied privately (recall
writes recall counts) with index files built once beside the cache (a rebuild in the server's
warm-up thread would otherwise be timed). Both servers run at once: a few warm-up recalls each,
then QUERIES rounds in which each server (first one, then the other, alternating) answers one
trivial call (`get_profile`) and one `recall` of a bag of 6-8 common words; then QUERIES / 2
`store` calls each (hashing embedder: the embedding costs ~0.5 ms). The server share is
p50(recall) - p50(trivial call).

Run: ``python -m pytest benches/test_fts_mcp_bench.py --benchmark-enable -s``
(``CPERSONA_BENCH_FTS_ROWS`` picks sizes; results also go to ``$CPERSONA_BENCH_OUT`` as JSON).
Without ``--benchmark-enable`` it runs once on 2,000 rows as a smoke test.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import sys
import time
from pathlib import Path

import anyio
import fts_bench_support as support
import numpy as np
import pytest
from cpersona import _backend
from cpersona.embedding.hashing import HashingProvider
from cpersona.fts.index import FtsIndex
from cpersona.storage import open_database
from cpersona.vectors.index import VectorIndex
from mcp import Client, StdioServerParameters

kernels = _backend.from_environment()

pytestmark = pytest.mark.timeout(3600)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    support.parametrize_rows(metafunc)


@pytest.fixture(scope="module")
def corpus(rows: int, request: pytest.FixtureRequest, tmp_path_factory) -> Path:
    return support.corpus_path(rows, request, tmp_path_factory)


def _embedded(path: Path) -> Path:
    out = path.with_name(path.name.replace(".db", "-emb.db"))
    if out.exists():
        return out
    tmp = out.with_suffix(".building")
    tmp.unlink(missing_ok=True)
    shutil.copy(path, tmp)
    db = open_database(str(tmp))
    embedder = HashingProvider()
    try:
        rows = db.query("SELECT id, content FROM memories ORDER BY id")
        for start in range(0, len(rows), 2048):
            batch = rows[start : start + 2048]
            vecs = np.ascontiguousarray(embedder.embed([r[1] for r in batch]), dtype="<f4")
            with db.atomic() as conn:
                conn.executemany(
                    "UPDATE memories SET embedding = ? WHERE id = ?",
                    [(vecs[i].tobytes(), r[0]) for i, r in enumerate(batch)],
                )
    finally:
        db.close()
    tmp.rename(out)
    return out


INDEX_FILES = (".memories.vec", ".episodes.vec", ".memories.fts", ".episodes.fts")


def _with_indexes(source: Path) -> None:
    """Build the vector and full-text index files beside the cached corpus once, so that a
    server starts on current indexes (a rebuild in its warm-up thread would be timed)."""
    if all(Path(f"{source}{ext}").exists() for ext in INDEX_FILES):
        return
    db = open_database(str(source))
    try:
        for table in ("memories", "episodes"):
            VectorIndex(db, table).rebuild()
            FtsIndex(db, table, kernels.FtsIndex).rebuild()
    finally:
        db.close()


def _private_copy(source: Path, dest: Path) -> None:
    shutil.copy(source, dest)
    for ext in INDEX_FILES:
        shutil.copy(f"{source}{ext}", f"{dest}{ext}")


def _params(db: Path, fts_index: bool) -> StdioServerParameters:
    env = {
        "CPERSONA_DB_PATH": str(db),
        "CPERSONA_EMBEDDING_MODE": "hashing",
        "CPERSONA_FTS_INDEX": "true" if fts_index else "false",
        # A fresh copy has no calibration sidecar: the start-up calibration would run its
        # pseudo-recalls in the background for minutes at 100,000 rows, inside the timings.
        "CPERSONA_CALIBRATE_ON_MODEL_CHANGE": "false",
        # Absolute: the server runs in the database's directory, and a relative entry (the
        # usual `PYTHONPATH=python` of a worktree) would silently load another checkout.
        "PYTHONPATH": os.pathsep.join(
            str(Path(p).resolve()) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p
        ),
    }
    return StdioServerParameters(
        command=sys.executable, args=["-m", "cpersona"], env=env, cwd=str(db.parent)
    )


async def _round(client: Client, q: str, out: dict[str, list[float]]) -> None:
    t0 = time.perf_counter()
    await client.call_tool("get_profile", {"agent_id": "bench"})
    t1 = time.perf_counter()
    r = await client.call_tool("recall", {"agent_id": "bench", "query": q, "limit": 10})
    t2 = time.perf_counter()
    assert not r.is_error, r.content[0].text
    out["trivial"].append((t1 - t0) * 1e3)
    out["recall"].append((t2 - t1) * 1e3)


async def _store(client: Client, label: str, i: int, q: str, out: dict[str, list[float]]) -> None:
    message = {"id": f"bench-{label}-{i}", "content": f"{q} stored {i}"}
    t0 = time.perf_counter()
    r = await client.call_tool("store", {"agent_id": "bench", "message": message})
    out["store"].append((time.perf_counter() - t0) * 1e3)
    assert not r.is_error, r.content[0].text


async def _measure(dbs: dict[str, Path], rounds: int) -> dict[str, dict[str, float]]:
    """Both servers at once, their calls alternating (who goes first alternates too), so that
    the shared machine's load falls on both alike."""
    queries = support.queries()
    times = {label: {"trivial": [], "recall": [], "store": []} for label in dbs}
    labels = list(dbs)
    async with (
        Client(_params(dbs[labels[0]], labels[0] == "index")) as first,
        Client(_params(dbs[labels[1]], labels[1] == "index")) as second,
    ):
        clients = {labels[0]: first, labels[1]: second}
        for q in queries[:3]:
            for client in clients.values():
                await client.call_tool("recall", {"agent_id": "bench", "query": q, "limit": 10})
        for i in range(rounds):
            order = labels if i % 2 == 0 else labels[::-1]
            for label in order:
                await _round(clients[label], queries[i % len(queries)], times[label])
        for i in range(rounds // 2):
            order = labels if i % 2 == 0 else labels[::-1]
            for label in order:
                await _store(clients[label], label, i, queries[i], times[label])
    out = {}
    for label, t in times.items():
        recall_p50, trivial_p50 = statistics.median(t["recall"]), statistics.median(t["trivial"])
        q = statistics.quantiles(t["recall"], n=4)
        out[label] = {
            "recall_p50_ms": round(recall_p50, 2),
            "recall_iqr_ms": round(q[2] - q[0], 2),
            "trivial_p50_ms": round(trivial_p50, 2),
            "server_share_ms": round(recall_p50 - trivial_p50, 2),
            "store_p50_ms": round(statistics.median(t["store"]), 2),
        }
    return out


def test_recall_server_share(corpus: Path, rows: int, request, tmp_path: Path) -> None:
    full = request.config.getoption("benchmark_enable", False)
    source = _embedded(corpus)
    _with_indexes(source)
    rounds = 60 if full else 5
    dbs = {}
    for label in ("index", "fts5"):
        dbs[label] = tmp_path / f"{label}.db"
        _private_copy(source, dbs[label])
    results = anyio.run(_measure, dbs, rounds)
    print(f"\n{rows} rows: {json.dumps(results)}")
    out = os.environ.get("CPERSONA_BENCH_OUT")
    if out:
        with open(out, "a") as f:
            f.write(json.dumps({"rows": rows, **results}) + "\n")
