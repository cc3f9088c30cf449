"""The MCP client helper of the black-box tool tests: `Tools` calls tools through the official
client and decodes their single JSON text content; over an in-process engine it also reads
the rows behind the tools (`rows`, `snapshot`) and writes what no tool can (`execute`)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

from cpersona.engine import Engine
from cpersona.server.app import build_server
from mcp import Client

#: The agent of the recall helpers unless a test names another.
AGENT = "alice"
DATA_TABLES = ("memories", "episodes", "profiles", "pending_memory_tasks")


class Tools:
    """Calls tools over one client; `engine` is the in-process engine behind it, if any."""

    def __init__(self, client: Client, engine: Engine | None = None) -> None:
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

    # -- the rows behind the tools (an in-process engine) --------------------------------------

    def _engine(self) -> Engine:
        assert self.engine is not None, "this client has no in-process engine"
        return self.engine

    def rows(self) -> dict[str, list[tuple[Any, ...]]]:
        """Every row of the data tables, all columns: to prove nothing changed."""
        db = self._engine().db
        return {
            table: [tuple(row) for row in db.query(f"SELECT * FROM {table} ORDER BY id")]
            for table in DATA_TABLES
        }

    def execute(self, sql: str, params: tuple[Any, ...] = ()) -> None:
        """A direct write, for state no tool creates (legacy pending tasks, a failing trigger)."""
        with self._engine().db.atomic() as conn:
            conn.execute(sql, params)

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

    # -- recall helpers ------------------------------------------------------------------------

    async def store(self, content: str, agent: str = AGENT, **message: Any) -> int:
        """Store one memory (message fields as keywords; `channel`/`project_id` too); its id."""
        extra = {k: message.pop(k) for k in ("channel", "project_id") if k in message}
        out = await self(
            "store", {"agent_id": agent, "message": {"content": content, **message}, **extra}
        )
        assert out["result"] == "stored", out
        return int(out["id"])

    async def store_all(self, contents: list[str], agent: str = AGENT, **kw: Any) -> list[int]:
        return [await self.store(c, agent, **kw) for c in contents]

    async def episode(self, summary: str, agent: str = AGENT, **kw: Any) -> int:
        out = await self("archive_episode", {"agent_id": agent, "summary": summary, **kw})
        assert out["ok"] is True, out
        return int(out["episode_id"])

    async def recall(self, query: str, agent: str = AGENT, **kw: Any) -> dict[str, Any]:
        out = await self("recall", {"agent_id": agent, "query": query, **kw})
        assert "messages" in out and "ok" not in out, out
        return out

    async def messages(self, query: str, agent: str = AGENT, **kw: Any) -> list[dict[str, Any]]:
        return (await self.recall(query, agent, **kw))["messages"]

    async def contents(self, query: str, agent: str = AGENT, **kw: Any) -> list[str]:
        return [m["content"] for m in await self.messages(query, agent, **kw)]

    async def episode_created_at(self, episode_id: int, agent: str = AGENT) -> datetime:
        listed = await self("list_episodes", {"agent_id": agent, "limit": 200})
        (row,) = [e for e in listed["episodes"] if e["id"] == episode_id]
        return parse_utc(row["created_at"])


def parse_utc(stamp: str) -> datetime:
    t = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    return t if t.tzinfo else t.replace(tzinfo=UTC)


def documented_answer(tool: str, result: Any) -> dict[str, Any] | None:
    """A raw tool result in the documented envelope: one text content; a schema violation is
    the SDK's "Input validation error" (None), anything else a JSON object, and one with an
    `error` says `ok: false` (a handler refusal, never an exception that escaped one)."""
    assert len(result.content) == 1
    text = result.content[0].text
    if result.is_error:
        assert text.startswith("Input validation error: "), text
        return None
    out = json.loads(text)
    assert isinstance(out, dict)
    if "error" in out:
        assert out.get("ok") is False, (tool, out)
    return out


async def call_all(engine: Engine, batch: list[tuple[str, dict[str, Any]]], check: Any) -> None:
    """Each call of `batch` through one in-memory client, its raw result given to `check`."""
    async with in_memory(engine) as tools:
        for tool, args in batch:
            check(tool, await tools.raw(tool, args))


@contextlib.asynccontextmanager
async def in_memory(engine: Engine) -> AsyncIterator[Tools]:
    """A client over `engine`'s server, in this process (the official client's memory pipe)."""
    async with Client(build_server(engine), raise_exceptions=True) as client:
        yield Tools(client, engine)
