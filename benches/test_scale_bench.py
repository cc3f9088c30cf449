"""The vector arm on real databases: the index against the SQLite BLOB scan, and recall end to end.

Corpora (scale_support.py): 10,000 / 100,000 / 237,654 embedded memories of one agent at 384
and 768 dims, cached on disk. For each:

- `search.scan` (the index fast path: sync check, shared lock, mapped file, kernel scan) and
  `search.scan_sqlite` (the no-index path: BLOBs streamed out of SQLite in chunks), for the
  window (MAX_MEMORIES = 10,000) and for the far region (REACH = 200,000; only where the corpus
  has rows beyond the window). Threshold below every score, k = far_k = 10. Both paths must
  return the same ids and scores before anything is timed.
- `Recaller.recall` through an `Engine` (vector arm on both tables, FTS, fusion, scoring,
  hydration, recall-count bookkeeping) with the embedder replaced by a fixed query vector, at
  the default reach (0: window only) and at REACH = 200,000; on a private copy of the corpus,
  since recall writes recall counts.

Run: ``python -m pytest benches/test_scale_bench.py --benchmark-enable
--benchmark-json=scale.json`` (the first run builds the corpora: about two minutes). Without
``--benchmark-enable`` every case runs once on a 1,200-row corpus as a smoke test.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import numpy as np
import pytest
import scale_support as scale
from bench_support import record
from cpersona import _backend
from cpersona.config import Settings
from cpersona.engine import Engine
from cpersona.retrieval.pipeline import RecallRequest
from cpersona.storage import open_database
from cpersona.storage.scan_request import ScanLimits
from cpersona.vectors import search
from cpersona.vectors.index import VectorIndex

#: The kernels CPERSONA_KERNEL names: the engine runs on them and the record says which.
KERNEL_NAME = _backend.name_of(_backend.from_environment())
KERNEL = _backend.load(KERNEL_NAME).KERNEL

META_BYTES = 8 * 4 + 1 + 4  # agent, project, channel, source, flags, order per row

pytestmark = pytest.mark.timeout(3600)


pytest_generate_tests = scale.parametrize_spec


@pytest.fixture(scope="module")
def corpus(spec, request, tmp_path_factory) -> scale.Corpus:
    return scale.corpus_for(spec, request.config, tmp_path_factory)


@pytest.fixture(scope="module")
def opened(corpus) -> Iterator[tuple[scale.Corpus, VectorIndex]]:
    db = open_database(str(corpus.db_path))
    index = VectorIndex(db, "memories")
    try:
        yield corpus, index
    finally:
        index.close()
        db.close()


def _span(region: str, rows: int, work: scale.Workload) -> int:
    """Rows a scan of `region` scores: the window, or the window and the far region."""
    return min(rows, work.window if region == "window" else work.reach)


def _skip_empty_far(region: str, rows: int, work: scale.Workload) -> None:
    if region == "far" and rows <= work.window:
        pytest.skip("no rows beyond the window: the far region is empty")


@pytest.mark.parametrize("path", ["index", "sqlite"])
@pytest.mark.parametrize("region", ["window", "far"])
def test_scale_scan(benchmark, opened, region, path, bandwidth_gbs, request) -> None:
    corpus, index = opened
    work = scale.workload(request.config)
    _skip_empty_far(region, corpus.rows, work)
    query = corpus.query()
    reach = work.reach if region == "far" else 0
    limits = ScanLimits(work.window, reach, threshold=-1.0, k=work.k, far_k=work.k)

    def via_index() -> search.Hits:
        return search.scan(index, query, scale.SCOPE, limits)

    def via_sqlite() -> search.Hits:
        return search.scan_sqlite(index.db, "memories", query, scale.SCOPE, limits)

    a, b = via_index(), via_sqlite()
    correct = (
        all(
            np.array_equal(x, y)
            for x, y in zip(dataclasses.astuple(a), dataclasses.astuple(b), strict=True)
        )
        and a.near_ids.size == work.k
    )
    assert correct
    run = via_index if path == "index" else via_sqlite
    benchmark.group = f"{region} {corpus.rows}x{corpus.dim}"
    slow = path == "sqlite" or region == "far"
    benchmark.pedantic(run, rounds=5 if slow else 50, iterations=1, warmup_rounds=1)
    span = _span(region, corpus.rows, work)
    record(
        benchmark,
        nbytes=span * (4 * corpus.dim + (META_BYTES if path == "index" else 0)),
        bandwidth=bandwidth_gbs,
        backend=KERNEL,
        path=f"search.scan ({path})" if path == "index" else "search.scan_sqlite",
        rows=corpus.rows,
        dim=corpus.dim,
        scanned=span,
        correct=correct,
        **scale.machine_state(),
    )


@pytest.fixture(scope="module")
def engine_copy(corpus, tmp_path_factory) -> scale.Corpus:
    return corpus.copy_to(tmp_path_factory.mktemp("recall"))


@pytest.fixture
def engine(engine_copy, request) -> Iterator[Engine]:
    reach = request.node.callspec.params["reach"]
    work = scale.workload(request.config)
    _skip_empty_far(reach, engine_copy.rows, work)
    settings = Settings(
        db_path=str(engine_copy.db_path),
        embedding_mode="hashing",
        kernel=KERNEL_NAME,
        max_memories=work.window,
        vector_reach=work.reach if reach == "far" else 0,
    )
    engine = Engine(settings, embedder=scale.FixedQueryProvider(engine_copy.query()))
    try:
        yield engine
    finally:
        engine.close()


@pytest.mark.parametrize("reach", ["window", "far"])
def test_scale_recall(benchmark, engine, engine_copy, reach) -> None:
    req = RecallRequest(agent_id=scale.AGENT, query=scale.QUERY_TEXT, limit=10)
    first = engine.recaller.recall(req)
    assert first.rows, "recall found nothing"
    benchmark.group = f"recall {engine_copy.rows}x{engine_copy.dim}"
    benchmark.pedantic(
        engine.recaller.recall, args=(req,), rounds=5 if reach == "far" else 20,
        iterations=1, warmup_rounds=1,
    )  # fmt: skip
    benchmark.extra_info.update(
        backend=KERNEL,
        path=f"Recaller.recall (reach {engine.settings.vector_reach})",
        rows=engine_copy.rows,
        dim=engine_copy.dim,
        returned=len(first.rows),
        recall_mode=engine.settings.recall_mode,
        **scale.machine_state(),
    )
