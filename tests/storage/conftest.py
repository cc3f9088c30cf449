"""Storage fixtures: fresh databases and a private copy of the CPersona 2.5.12 sample."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from cpersona.storage import Database, open_database
from storage_helpers import SAMPLE


@pytest.fixture
def fresh_db() -> Iterator[Database]:
    """An in-memory database with the current schema."""
    db = open_database(":memory:")
    yield db
    db.close()


@pytest.fixture
def sample_path(tmp_path: Path) -> Path:
    """A writable private copy of the 2.5.12 sample (the shared file is never opened for write)."""
    if not SAMPLE.exists():
        pytest.skip(f"fixture database not found: {SAMPLE}")
    target = tmp_path / "sample.db"
    shutil.copyfile(SAMPLE, target)  # copyfile: no mode bits (the shared copy is read-only)
    for suffix in ("-wal", "-shm"):
        side = SAMPLE.with_name(SAMPLE.name + suffix)
        if side.exists() and side.stat().st_size:
            shutil.copyfile(side, target.with_name(target.name + suffix))
    os.chmod(target, 0o600)
    return target
