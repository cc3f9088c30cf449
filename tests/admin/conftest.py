"""Fixtures of the health, session-control and operating-context tests: black-box MCP clients
over an engine whose database a test can damage directly (`plant`).

Every engine gets its own operating-context path inside the test's temporary directory, so a
file in the developer's home never leaks into a test; a test writes `oc_path` to wake it up.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from cpersona.config import Settings
from cpersona.embedding.hashing import HashingProvider
from cpersona.engine import Engine
from cpersona.server.app import build_server
from mcp import Client


@pytest.fixture
def oc_path(tmp_path: Path) -> Path:
    return tmp_path / "operating-context.toml"


@pytest.fixture
def make_engine(
    tmp_path: Path, oc_path: Path, database_url_for: Callable[[str], str | None]
) -> Iterator[Callable[..., Engine]]:
    engines: list[Engine] = []

    def make(**overrides: Any) -> Engine:
        path = str(overrides.get("db_path", tmp_path / "mem.db"))
        base = Settings(
            db_path=str(tmp_path / "mem.db"),
            embedding_mode="hashing",
            operating_context_path=str(oc_path),
            database_url=database_url_for(path),
        )
        engine = Engine(dataclasses.replace(base, **overrides), embedder=HashingProvider())
        engines.append(engine)
        return engine

    yield make
    for engine in engines:
        engine.close()


class Tools:
    """Calls tools and decodes their single JSON text content."""

    def __init__(self, client: Client, engine: Engine) -> None:
        self.client = client
        self.engine = engine

    async def names(self) -> list[str]:
        return [tool.name for tool in (await self.client.list_tools()).tools]

    async def raw(self, name: str, args: dict[str, Any] | None = None) -> Any:
        return await self.client.call_tool(name, args or {})

    async def __call__(self, name: str, args: dict[str, Any] | None = None) -> dict[str, Any]:
        result = await self.raw(name, args)
        assert not result.is_error, result.content[0].text
        assert len(result.content) == 1
        return json.loads(result.content[0].text)

    def rows(self) -> dict[str, list[tuple[Any, ...]]]:
        """Every stored row of the data tables (what a skipped write must leave untouched)."""
        out = {}
        for table in ("memories", "episodes", "profiles", "pending_memory_tasks"):
            out[table] = [tuple(r) for r in self.engine.db.query(f"SELECT * FROM {table}")]
        return out


@pytest.fixture
def connect(make_engine: Callable[..., Engine]) -> Callable[..., Any]:
    """`async with connect(**settings_overrides) as tools:` a client over a fresh engine."""

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
