"""Write cost with the index kept current, and the cost of rebuilding it.

- store: `Writer.store` through an `Engine` (dedup probe, embedding by a fixed-width provider,
  one SQLite transaction with `synchronous=FULL`, then the post-write sync of both index files),
  on a private copy of a 10,000- and a 237,654-row corpus at 768 dims. Each stored row is the
  newest, so each sync inserts it at the head of the scan order (the worst case of the order
  insert). The time spent in `VectorIndex.sync` of the memories index is recorded apart
  (`sync_*_ms`): it should not grow with the row count beyond that order insert.
- recall after a store: `Recaller.recall` (as in test_scale_bench.py, window only) right after
  each store, untimed: what an agent that stores and then recalls pays. Own writes clear the
  recaller's cached scope statistics (pool size, timestamp span), so each of these recalls
  recomputes them, and brings the index current (done already by the store's own sync).
- rebuild: `cpersona index rebuild --table memories` as a process (start-up included) on a copy
  of the 237,654 x 768 corpus.

Run: ``python -m pytest benches/test_scale_write_bench.py --benchmark-enable
--benchmark-json=write.json``. Without ``--benchmark-enable`` each case runs once on a
1,200-row corpus.
"""

from __future__ import annotations

import itertools
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import scale_support as scale
from cpersona import _backend
from cpersona.config import Settings
from cpersona.engine import Engine
from cpersona.retrieval.pipeline import RecallRequest

#: The kernels CPERSONA_KERNEL names: the engine runs on them and the record says which.
KERNEL_NAME = _backend.name_of(_backend.from_environment())
KERNEL = _backend.load(KERNEL_NAME).KERNEL

DIM = 768
STORE_SIZES = (10_000, 237_654)
REBUILD_SIZE = 237_654

pytestmark = pytest.mark.timeout(3600)


def _rows(config: pytest.Config, full: tuple[int, ...]) -> list[int]:
    return list(full) if scale.full_run(config) else [scale.SMOKE_ROWS]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "store_rows" in metafunc.fixturenames:
        metafunc.parametrize("store_rows", _rows(metafunc.config, STORE_SIZES), scope="module")
    if "rebuild_rows" in metafunc.fixturenames:
        metafunc.parametrize("rebuild_rows", _rows(metafunc.config, (REBUILD_SIZE,)))


def _copy(rows: int, request: pytest.FixtureRequest, tmp: Any) -> scale.Corpus:
    if scale.full_run(request.config):
        return scale.corpus(rows, DIM).copy_to(tmp.mktemp("write"))
    return scale.corpus(rows, DIM, tmp.mktemp("corpus"))


class Timed:
    """Wraps a callable and keeps the duration of each call."""

    def __init__(self, fn: Callable[[], None]) -> None:
        self.fn = fn
        self.seconds: list[float] = []

    def __call__(self) -> None:
        start = time.perf_counter()
        try:
            self.fn()
        finally:
            self.seconds.append(time.perf_counter() - start)


@pytest.fixture(scope="module")
def write_engine(store_rows, request, tmp_path_factory) -> Iterator[tuple[Engine, scale.Corpus]]:
    corpus = _copy(store_rows, request, tmp_path_factory)
    settings = Settings(db_path=str(corpus.db_path), embedding_mode="hashing", kernel=KERNEL_NAME)
    engine = Engine(settings, embedder=scale.FixedQueryProvider(corpus.query()))
    try:
        yield engine, corpus
    finally:
        engine.close()


def test_store_latency(benchmark, write_engine) -> None:
    engine, corpus = write_engine
    index = engine.indexes["memories"]
    sync = Timed(index.sync)
    index.sync = sync  # type: ignore[method-assign]  # Engine._after_write calls it per store
    counter = itertools.count()

    def store() -> None:
        n = next(counter)
        out = engine.writer.store(
            scale.AGENT, {"content": f"bench store {n}: harbor schedule note"}, "", ""
        )
        assert out["result"] == "stored", out

    full = corpus.rows > scale.SMOKE_ROWS
    benchmark.group = f"store {corpus.rows}x{corpus.dim}"
    benchmark.pedantic(store, rounds=200 if full else 3, iterations=1, warmup_rounds=5)
    timed = sync.seconds[5:] or sync.seconds  # the warm-up rounds' syncs are not reported
    live = engine.db.query_one("SELECT COUNT(*) FROM memories")[0]
    assert engine.indexes["memories"].verify() == []
    benchmark.extra_info.update(
        backend=KERNEL,
        path="Writer.store + index sync",
        rows=corpus.rows,
        dim=corpus.dim,
        rows_after=int(live),
        sync_min_ms=round(min(timed) * 1e3, 3),
        sync_median_ms=round(statistics.median(timed) * 1e3, 3),
        sync_max_ms=round(max(timed) * 1e3, 3),
        **scale.machine_state(),
    )


def test_recall_after_store(benchmark, write_engine) -> None:
    engine, corpus = write_engine
    counter = itertools.count()
    req = RecallRequest(agent_id=scale.AGENT, query=scale.QUERY_TEXT, limit=10)

    def store() -> None:
        n = next(counter)
        out = engine.writer.store(
            scale.AGENT, {"content": f"bench recall-after-store {n}: harbor note"}, "", ""
        )
        assert out["result"] == "stored", out

    store()
    assert engine.recaller.recall(req).rows
    full = corpus.rows > scale.SMOKE_ROWS
    benchmark.group = f"recall after store {corpus.rows}x{corpus.dim}"
    benchmark.pedantic(
        engine.recaller.recall, args=(req,), setup=store, rounds=50 if full else 3,
        warmup_rounds=2,
    )  # fmt: skip
    benchmark.extra_info.update(
        backend=KERNEL,
        path="store (untimed), then Recaller.recall (reach 0)",
        recall_mode=engine.settings.recall_mode,
        rows=corpus.rows,
        dim=corpus.dim,
        **scale.machine_state(),
    )


def test_index_rebuild(benchmark, rebuild_rows, request, tmp_path_factory) -> None:
    corpus = _copy(rebuild_rows, request, tmp_path_factory)
    env = {k: v for k, v in os.environ.items() if not k.startswith("CPERSONA_")}
    env["CPERSONA_DB_PATH"] = str(corpus.db_path)
    command = [
        sys.executable,
        "-m",
        "cpersona",
        "index",
        "rebuild",
        "--table",
        "memories",
        "--kind",
        "vector",
    ]

    def rebuild() -> str:
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=1800)
        assert done.returncode == 0, done.stderr
        return done.stdout

    out = rebuild()
    assert f"memories: rebuilt, {corpus.rows} rows" in out, out
    benchmark.group = f"index rebuild {corpus.rows}x{corpus.dim}"
    benchmark.pedantic(rebuild, rounds=3 if corpus.rows > scale.SMOKE_ROWS else 1, iterations=1)
    benchmark.extra_info.update(
        backend=KERNEL,
        path="cpersona index rebuild (process)",
        rows=corpus.rows,
        dim=corpus.dim,
        index_bytes=corpus.index_path.stat().st_size,
        **scale.machine_state(),
    )
