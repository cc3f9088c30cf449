"""Fixtures of the recall tests: every engine on the test's kernel and the spec's fusion.

A test that makes an engine (through `make_engine`, `connect` or `tools`, tests/conftest.py)
runs on the Rust kernels and the numpy twin over SQLite, and on Rust over PostgreSQL
(support/backends.py PAIRS; STYLE.md §8). Engines of one test share one database file unless
given another `db_path`, so a corpus written through one configuration can be recalled through
another.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest


@pytest.fixture
def engine_defaults(kernel: str) -> dict[str, Any]:
    # These tests pin the spec's fusion default, rrf (retrieval.md §17), which is also
    # cpersona's default; a test passes recall_mode to change it.
    return {"recall_mode": "rrf", "kernel": kernel}


@pytest.fixture
def db_path(tmp_path: Path) -> str:
    """The database of the engines `make_engine` makes (its default `db_path`)."""
    return str(tmp_path / "mem.db")
