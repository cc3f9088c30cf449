"""Storage fixtures: fresh databases (the 2.5.12 sample's copy is the shared `sample_db`)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from cpersona.storage import Database, open_database


@pytest.fixture
def fresh_db() -> Iterator[Database]:
    """An in-memory database with the current schema."""
    db = open_database(":memory:")
    yield db
    db.close()
