"""Fixtures of the migrate tests: the 2.5.12 fixture database (a copy) and a generated one."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from migrate_support import FIXTURE, generate


@pytest.fixture
def fixture_copy(tmp_path: Path) -> Path:
    if not FIXTURE.exists():
        pytest.skip(f"{FIXTURE} is not available")
    for suffix in ("", "-wal", "-shm"):
        if Path(f"{FIXTURE}{suffix}").exists():
            shutil.copyfile(f"{FIXTURE}{suffix}", tmp_path / f"fixture.db{suffix}")
    return tmp_path / "fixture.db"


@pytest.fixture
def generated(tmp_path: Path) -> Path:
    db = tmp_path / "generated.db"
    generate(db, 3000)
    return db
