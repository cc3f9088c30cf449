"""Fixtures of the vector-index tests: the kernel backend."""

from __future__ import annotations

import cpersona.vectors.search as search
import pytest
from vecindex_support import kernel_module


@pytest.fixture(params=["rust", "numpy"])
def backend(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Runs the test once per kernel backend: both `scan` and `scan_sqlite` use it."""
    monkeypatch.setattr(search, "kernels", kernel_module(request.param))
    return str(request.param)
