"""Helpers of the portability tests: the MCP client wrapper and readers of exported files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from cpersona.config import Settings
from cpersona.engine import Engine
from cpersona.storage import open_database
from mcp import Client


class Tools:
    """Calls tools and decodes their single JSON text content."""

    def __init__(self, client: Client, engine: Engine) -> None:
        self.client = client
        self.engine = engine

    async def raw(self, name: str, args: dict[str, Any] | None = None) -> Any:
        return await self.client.call_tool(name, args or {})

    async def __call__(self, name: str, args: dict[str, Any] | None = None) -> dict[str, Any]:
        result = await self.raw(name, args)
        assert not result.is_error, result.content[0].text
        assert len(result.content) == 1
        return json.loads(result.content[0].text)

    def rows(self) -> dict[str, list[tuple[Any, ...]]]:
        """Every row of the four data tables, all columns: to prove nothing changed."""
        out = {}
        for table in ("memories", "episodes", "profiles", "pending_memory_tasks"):
            rows = self.engine.db.query(f"SELECT * FROM {table} ORDER BY id")
            out[table] = [tuple(row) for row in rows]
        return out

    def execute(self, sql: str, params: tuple[Any, ...] = ()) -> None:
        """A direct write, for state no tool creates (legacy pending tasks, a failing trigger)."""
        with self.engine.db.atomic() as conn:
            conn.execute(sql, params)


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def blobs(settings: Settings, table: str) -> dict[int, bytes | None]:
    """id -> embedding BLOB of a table, read beside the server (either backend)."""
    db = open_database(settings.db_path, database_url=settings.database_url, pool_size=1)
    try:
        return {row[0]: row[1] for row in db.query(f"SELECT id, embedding FROM {table}")}
    finally:
        db.close()
