"""Fixtures of the vector-index tests: the kernel backend, engines on file databases."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import cpersona.vectors.search as search
import pytest
from cpersona.engine import Engine
from vecindex_support import new_engine


def kernel_module(name: str) -> ModuleType:
    """`cpersona._core` or `cpersona._fallback`; a missing extension skips (fails in CI)."""
    if name == "numpy":
        from cpersona import _fallback

        return _fallback
    try:
        from cpersona import _core
    except ImportError:
        if os.environ.get("CPERSONA_REQUIRE_RUST") == "1":
            raise
        pytest.skip("the Rust extension is not built")
    return _core


@pytest.fixture(params=["rust", "numpy"])
def backend(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Runs the test once per kernel backend: both `scan` and `scan_sqlite` use it."""
    monkeypatch.setattr(search, "kernels", kernel_module(request.param))
    return str(request.param)


@pytest.fixture
def make_engine(tmp_path: Path) -> Iterator[Callable[..., Engine]]:
    engines: list[Engine] = []

    def make(name: str = "mem.db", embedder: Any = None) -> Engine:
        engine = new_engine(tmp_path / name, embedder)
        engines.append(engine)
        return engine

    yield make
    for engine in engines:
        engine.close()
