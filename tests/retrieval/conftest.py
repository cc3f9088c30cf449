"""Fixtures of the recall tests: engines over one temporary database, MCP clients, backends.

Every test takes `backend` (directly or through `tools` / `connect`), so it runs once on the
Rust kernels and once on the numpy twin (STYLE.md §8). Engines made by `make_engine` share
one database file per test unless given another `path`, so a corpus written through one
configuration can be recalled through another.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import cpersona.retrieval.pipeline as pipeline
import cpersona.vectors.search as search
import pytest
from cpersona import _fallback
from cpersona.config import Settings
from cpersona.embedding.hashing import HashingProvider
from cpersona.engine import Engine
from cpersona.server.app import build_server
from mcp import Client
from recall_support import Tools


@pytest.fixture(params=["rust-sqlite", "numpy-sqlite", "rust-postgresql"])
def backend(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Runs the test on each kernel backend (the vector scan, fusion and the backfill dot) over
    SQLite, and on the Rust kernels over PostgreSQL (issue 12; the kernels do not depend on
    the database, so the numpy twin is not run twice)."""
    kernels, database = str(request.param).split("-")
    if kernels == "numpy":
        module = _fallback
    else:
        try:
            from cpersona import _core as module
        except ImportError as exc:
            if os.environ.get("CPERSONA_REQUIRE_RUST") == "1":
                pytest.fail(f"CPERSONA_REQUIRE_RUST=1 but cpersona._core does not import: {exc}")
            pytest.skip("cpersona._core is not built")
    monkeypatch.setattr(pipeline, "kernels", module)
    monkeypatch.setattr(search, "kernels", module)
    yield database


@pytest.fixture
def make_engine(
    tmp_path: Path, database_url_for: Callable[[str], str | None]
) -> Iterator[Callable[..., Engine]]:
    """`make_engine(path="mem.db", embedder=None, **settings_overrides)`: hashing by default.
    On PostgreSQL each distinct `path` is its own fresh database."""
    engines: list[Engine] = []

    def make(path: str = "mem.db", embedder: Any = None, **overrides: Any) -> Engine:
        url = database_url_for(path)
        # These tests pin the spec's fusion default, rrf (retrieval.md §17), which is also
        # cpersona's default; a test passes recall_mode to change it.
        base = Settings(
            db_path=str(tmp_path / path),
            embedding_mode="hashing",
            recall_mode="rrf",
            database_url=url,
        )
        provider = HashingProvider() if embedder is None else embedder
        engine = Engine(dataclasses.replace(base, **overrides), embedder=provider)
        engines.append(engine)
        return engine

    yield make
    for engine in reversed(engines):
        engine.close()


@pytest.fixture
def connect(make_engine: Callable[..., Engine]) -> Callable[..., Any]:
    """`async with connect(path=..., embedder=..., **overrides) as tools:` on a new engine."""

    @contextlib.asynccontextmanager
    async def open_client(**overrides: Any) -> AsyncIterator[Tools]:
        engine = make_engine(**overrides)
        async with Client(build_server(engine), raise_exceptions=True) as client:
            yield Tools(client, engine)

    return open_client


@pytest.fixture
async def tools(connect: Callable[..., Any]) -> AsyncIterator[Tools]:
    async with connect() as t:
        yield t
