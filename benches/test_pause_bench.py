"""What the shared pause costs: the check every write tool and every recall makes
(`Pauses.active`), in the process (SQLite, stdio) against in the database (PostgreSQL, one
indexed lookup that also reads the database's clock), paused and not; and taking a pause.

Run: ``pytest benches/test_pause_bench.py --benchmark-enable`` (numbers: docs/scale-out.md,
"Shared state").
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import pg_support
from cpersona.session import Pauses
from cpersona.storage import open_database
from cpersona.storage.interface import Store


@pytest.fixture(scope="module")
def pg_store() -> Iterator[Store]:
    url = pg_support.fresh_database()
    db = open_database(":memory:", database_url=url)
    yield db
    db.close()
    pg_support.drop_database(url)


@pytest.fixture(params=["process", "database"])
def pauses(request: pytest.FixtureRequest) -> Pauses:
    if request.param == "process":
        return Pauses()
    return Pauses(db=request.getfixturevalue("pg_store"))


@pytest.mark.parametrize("paused", [False, True], ids=["not-paused", "paused"])
def test_pause_check(benchmark, pauses: Pauses, paused: bool) -> None:
    key = "bench-paused" if paused else "bench-free"
    if paused:
        pauses.pause(key, 3600)
    state = benchmark(pauses.active, key)
    assert (state is not None) is paused


def test_pause_take(benchmark, pauses: Pauses) -> None:
    answer = benchmark(pauses.pause, "bench-take", 600)
    assert answer["paused"] is True
