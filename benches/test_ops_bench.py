"""What the operator's tools cost on a large database (issue 14).

- scrape: one `GET /metrics` body (`Metrics.render`): the per-tool and per-stage series plus
  the gauges read at scrape time (COUNT(*) of five tables, both index headers, file sizes).
- backup: `bundle.create` (online backup API, one read snapshot, then SHA-256 of every file).
- restore: `bundle.restore` into a new file (checksums verified first, pages written through
  SQLite, quick_check).

On the 100,000 x 384 scale corpus (benches/scale_support.py) when measuring, else once on the
1,200-row smoke corpus.

Run: ``python -m pytest benches/test_ops_bench.py --benchmark-enable
--benchmark-json=ops.json``.
"""

from __future__ import annotations

import itertools
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import scale_support as scale
from cpersona.commands import bundle
from cpersona.config import Settings
from cpersona.embedding.hashing import HashingProvider
from cpersona.engine import Engine
from cpersona.server.metrics import Metrics

ROWS = 100_000
DIM = 384

pytestmark = pytest.mark.timeout(3600)


@pytest.fixture(scope="module")
def corpus(request: pytest.FixtureRequest, tmp_path_factory: Any) -> scale.Corpus:
    if scale.full_run(request.config):
        return scale.corpus(ROWS, DIM).copy_to(tmp_path_factory.mktemp("ops"))
    return scale.corpus(scale.SMOKE_ROWS, DIM, tmp_path_factory.mktemp("ops"))


def _settings(db: Path) -> Settings:
    return Settings(
        db_path=str(db), embedding_mode="hashing", operating_context_path=f"{db}.no-oc.toml"
    )


@pytest.fixture(scope="module")
def engine(corpus: scale.Corpus) -> Iterator[Engine]:
    engine = Engine(_settings(corpus.db_path), embedder=HashingProvider())
    yield engine
    engine.close()


def test_metrics_scrape(benchmark, engine: Engine, corpus: scale.Corpus):
    metrics = Metrics(engine, ["store", "recall"])
    metrics.warm()
    body, _ = metrics.render()
    assert f'cpersona_table_rows{{table="memories"}} {float(corpus.rows)}' in body.decode()
    benchmark.group = f"ops n={corpus.rows} d={DIM}"
    benchmark.extra_info.update(rows=corpus.rows, bytes=len(body))
    benchmark(metrics.render)


def test_backup(benchmark, corpus: scale.Corpus, tmp_path: Path):
    counter = itertools.count()
    db_bytes = corpus.db_path.stat().st_size

    def setup() -> tuple[tuple[Any, ...], dict[str, Any]]:
        dest = tmp_path / f"bundle-{next(counter)}"
        return (_settings(corpus.db_path), dest), {}

    def teardown_all() -> None:
        for path in tmp_path.glob("bundle-*"):
            shutil.rmtree(path)

    benchmark.group = f"ops n={corpus.rows} d={DIM}"
    benchmark.extra_info.update(rows=corpus.rows, db_bytes=db_bytes)
    try:
        benchmark.pedantic(bundle.create, setup=setup, rounds=3, iterations=1)
    finally:
        teardown_all()


def test_restore(benchmark, corpus: scale.Corpus, tmp_path: Path):
    source = tmp_path / "bundle"
    bundle.create(_settings(corpus.db_path), source)
    counter = itertools.count()

    def setup() -> tuple[tuple[Any, ...], dict[str, Any]]:
        return (source, str(tmp_path / f"restored-{next(counter)}.db")), {}

    benchmark.group = f"ops n={corpus.rows} d={DIM}"
    benchmark.extra_info.update(rows=corpus.rows, db_bytes=corpus.db_path.stat().st_size)
    benchmark.pedantic(bundle.restore, setup=setup, rounds=3, iterations=1)
