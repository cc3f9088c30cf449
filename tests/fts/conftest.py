"""Fixtures of the full-text index tests: `lexical_db`, a fresh database on each backend."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from cpersona.storage import Database, open_database


@pytest.fixture
def lexical_db(
    store_backend: str, request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[Callable[[], Database]]:
    """`lexical_db()`: the test's database (the same one on each call), migrated and empty, on
    its `store_backend`: SQLite in the test's directory, or a fresh PostgreSQL database."""
    opened: list[Database] = []
    url = request.getfixturevalue("pg_url") if store_backend == "postgresql" else None

    def make() -> Database:
        if not opened:
            opened.append(open_database(str(tmp_path / "lexical.db"), database_url=url))
        return opened[0]

    yield make
    for db in opened:
        db.close()
