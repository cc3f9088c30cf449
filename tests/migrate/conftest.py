"""Fixtures of the migrate tests: a generated 2.5.x database (the 2.5.12 sample's copy is
the shared `sample_db`)."""

from __future__ import annotations

from pathlib import Path

import pytest
from migrate_support import generate


@pytest.fixture
def generated(tmp_path: Path) -> Path:
    db = tmp_path / "generated.db"
    generate(db, 3000)
    return db
