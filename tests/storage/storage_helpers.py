"""Helpers for the storage tests: the 2.5.12 sample's path, read-only snapshots, an MCP caller."""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, closing
from pathlib import Path
from typing import Any

from cpersona.engine import Engine
from cpersona.server.app import build_server
from mcp import Client

DATA_TABLES = ("memories", "episodes", "profiles", "pending_memory_tasks", "schema_version")


def read_only(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    conn.row_factory = None
    return conn


def table_rows(path: Path, tables: tuple[str, ...] = DATA_TABLES) -> dict[str, list[tuple]]:
    """Every row of `tables`, every column (by name, sorted), read through a read-only handle."""
    out: dict[str, list[tuple]] = {}
    with closing(read_only(path)) as conn:
        for table in tables:
            cols = sorted(r[1] for r in conn.execute(f"PRAGMA table_info({table})"))
            sql = f"SELECT {', '.join(cols)} FROM {table} ORDER BY rowid"
            out[table] = [tuple(zip(cols, row, strict=True)) for row in conn.execute(sql)]
    return out


def _norm(sql: str | None) -> str:
    return re.sub(r"\s+", " ", sql or "").strip().lower()


def schema_objects(conn: sqlite3.Connection) -> dict[tuple[str, str], str]:
    """(type, name) -> normalised SQL of every schema object."""
    rows = conn.execute("SELECT type, name, sql FROM sqlite_master").fetchall()
    return {(t, n): _norm(s) for t, n, s in rows}


def file_schema(path: Path) -> dict[tuple[str, str], str]:
    with closing(read_only(path)) as conn:
        return schema_objects(conn)


def integrity(path: Path) -> str:
    with closing(sqlite3.connect(path)) as conn:
        return conn.execute("PRAGMA integrity_check").fetchone()[0]


@asynccontextmanager
async def mcp_tools(engine: Engine) -> AsyncIterator[Callable[..., Any]]:
    """`await call(name, args)` -> decoded JSON, through an in-memory MCP client."""
    async with Client(build_server(engine), raise_exceptions=True) as client:

        async def call(name: str, args: dict[str, Any] | None = None) -> Any:
            result = await client.call_tool(name, args or {})
            assert not result.is_error, result.content[0].text
            return json.loads(result.content[0].text)

        yield call
