"""Fixtures of the portability tests: every engine exports into the test's `export_dir`
unless a test overrides it (the engines and clients are tests/conftest.py's)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest


@pytest.fixture
def engine_defaults(export_dir: Path) -> dict[str, Any]:
    return {"export_dir": str(export_dir)}
