"""Fixtures of the server tests beyond the shared ones (tests/conftest.py: `make_engine`,
`connect`, `tools`): plain settings on a temporary database."""

from __future__ import annotations

from pathlib import Path

import pytest
from cpersona.config import Settings


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(db_path=str(tmp_path / "mem.db"), embedding_mode="hashing")
