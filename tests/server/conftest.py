"""Fixtures for black-box tool tests through the official MCP client, in memory."""

from __future__ import annotations

import contextlib
import dataclasses
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from cpersona.config import Settings
from cpersona.embedding.hashing import HashingProvider
from cpersona.engine import Engine
from cpersona.server.app import build_server
from mcp import Client


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(db_path=str(tmp_path / "mem.db"), embedding_mode="hashing")


@pytest.fixture
def make_engine(
    tmp_path: Path, database_url_for: Callable[[str], str | None]
) -> Callable[..., Engine]:
    """Engines on the test's backend (tests/pg_support.py: SQLite, then PostgreSQL)."""
    engines: list[Engine] = []

    def make(**overrides: Any) -> Engine:
        path = str(overrides.get("db_path", tmp_path / "mem.db"))
        base = Settings(
            db_path=str(tmp_path / "mem.db"),
            embedding_mode="hashing",
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

    def __init__(self, client: Client, engine: Engine | None = None) -> None:
        self.client = client
        self.engine = engine

    async def raw(self, name: str, args: dict[str, Any] | None = None) -> Any:
        return await self.client.call_tool(name, args or {})

    async def __call__(self, name: str, args: dict[str, Any] | None = None) -> dict[str, Any]:
        result = await self.raw(name, args)
        assert not result.is_error, result.content[0].text
        assert len(result.content) == 1
        return json.loads(result.content[0].text)

    async def snapshot(self) -> dict[str, Any]:
        """Everything a caller can observe of the database: both listings and every profile.

        Profiles have no listing tool, so they are read from the engine's database directly.
        """
        memories = await self("list_memories", {"agent_id": "", "limit": 500})
        episodes = await self("list_episodes", {"agent_id": "", "limit": 200})
        profiles = []
        if self.engine is not None:
            rows = self.engine.db.query(
                "SELECT agent_id, user_id, project_id, content, updated_at FROM profiles "
                "ORDER BY agent_id, user_id"
            )
            profiles = [tuple(row) for row in rows]
        return {"memories": memories, "episodes": episodes, "profiles": profiles}


@pytest.fixture
async def tools(make_engine: Callable[..., Engine]) -> AsyncIterator[Tools]:
    engine = make_engine()
    async with Client(build_server(engine), raise_exceptions=True) as client:
        yield Tools(client, engine)


@pytest.fixture
def connect(make_engine: Callable[..., Engine]) -> Callable[..., Any]:
    """`async with connect(**settings_overrides) as tools:` a client over a freshly made engine."""

    @contextlib.asynccontextmanager
    async def open_client(**overrides: Any) -> AsyncIterator[Tools]:
        engine = make_engine(**overrides)
        async with Client(build_server(engine), raise_exceptions=True) as client:
            yield Tools(client, engine)

    return open_client
