"""Helpers of the recall tests: a decoding tool caller and a few corpus writers."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from cpersona.engine import Engine
from mcp import Client

AGENT = "alice"

#: Found by FTS for IDENT; with the hashing embedder its cosine to the bare identifier is ~0.12:
#: below the vector threshold under rrf / rsf (0.15), so only the lexical channels find it.
IDENT = "CVE-2024-3094"
LEXICAL = (
    "Quarterly security digest: we rotated credentials, refreshed dependency pins, "
    "reviewed firewall rules, archived stale accounts, retrained staff on phishing, "
    "replaced expiring certificates, validated backups, tightened container policies, "
    "documented vendor contacts, rehearsed incident drills, updated asset inventories, "
    "and confirmed the CVE-2024-3094 remediation across every fleet."
)


class Tools:
    """Calls tools through the MCP client and decodes their single JSON text content."""

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
        return parse(row["created_at"])


def parse(stamp: str) -> datetime:
    t = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    return t if t.tzinfo else t.replace(tzinfo=UTC)


def iso(t: datetime) -> str:
    return t.astimezone(UTC).isoformat(timespec="seconds")


def hours_before(t: datetime, hours: float) -> str:
    return iso(t - timedelta(hours=hours))


def scores(messages: list[dict[str, Any]]) -> list[float]:
    return [m["match_reason"]["score"] for m in messages]


def refs(messages: list[dict[str, Any]]) -> list[str | None]:
    return [m.get("ref") for m in messages]
