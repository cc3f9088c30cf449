"""Fixtures of the portability tests: engines over temporary databases, black-box MCP clients.

Every engine gets an export directory inside the test's temporary directory (`export_dir`
fixture) unless a test overrides it, and its own operating-context path so nothing in the
developer's home leaks in. `open_client(**overrides)` opens a client over a new engine; pass
`db_path` for a second database and `embedder` for another provider.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from cpersona.config import Settings
from cpersona.embedding.hashing import HashingProvider
from cpersona.engine import Engine
from cpersona.server.app import build_server
from mcp import Client
from portability_support import Tools


@pytest.fixture
def export_dir(tmp_path: Path) -> Path:
    path = tmp_path / "exports"
    path.mkdir()
    return path


@pytest.fixture
def make_engine(
    tmp_path: Path, export_dir: Path, database_url_for: Callable[[str], str | None]
) -> Iterator[Callable[..., Engine]]:
    engines: list[Engine] = []

    def make(embedder: Any = None, **overrides: Any) -> Engine:
        path = str(overrides.get("db_path", tmp_path / "mem.db"))
        base = Settings(
            db_path=str(tmp_path / "mem.db"),
            embedding_mode="hashing",
            export_dir=str(export_dir),
            operating_context_path=str(tmp_path / "no-operating-context.toml"),
            database_url=database_url_for(path),
        )
        engine = Engine(
            dataclasses.replace(base, **overrides),
            embedder=embedder if embedder is not None else HashingProvider(),
        )
        engines.append(engine)
        return engine

    yield make
    for engine in engines:
        engine.close()


@pytest.fixture
def open_client(make_engine: Callable[..., Engine]) -> Callable[..., Any]:
    """`async with open_client(**overrides) as tools:` a client over a freshly made engine."""

    @contextlib.asynccontextmanager
    async def opened(**overrides: Any) -> AsyncIterator[Tools]:
        engine = make_engine(**overrides)
        async with Client(build_server(engine), raise_exceptions=True) as client:
            yield Tools(client, engine)

    return opened


@pytest.fixture
async def tools(open_client: Callable[..., Any]) -> AsyncIterator[Tools]:
    async with open_client() as client:
        yield client
