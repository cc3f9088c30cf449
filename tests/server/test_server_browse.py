"""list_memories and list_episodes through the MCP client: rows, isolation axes, limits, budgets.

Spec: surface.md §4.4, §4.5 (budgets), §6 (isolation axes).
"""

from __future__ import annotations

from typing import Any

import pytest
from cpersona.models import NewEpisode, NewMemory
from cpersona.storage import episodes as episode_sql
from cpersona.storage import memories as memory_sql

pytestmark = pytest.mark.anyio

MEMORY_KEYS = {
    "id",
    "agent_id",
    "project_id",
    "content",
    "source",
    "timestamp",
    "created_at",
    "locked",
    "channel",
}


async def store(tools: Any, content: str, agent: str = "alice", **kw: Any) -> int:
    out = await tools("store", {"agent_id": agent, "message": {"content": content}, **kw})
    assert out["result"] == "stored", out
    return out["id"]


def insert_memories(tools: Any, contents: list[str], agent: str = "alice") -> list[int]:
    """Rows written straight through storage (no embedding): setup for budget/limit tests."""
    ids = []
    with tools.engine.db.atomic() as conn:
        for i, text in enumerate(contents):
            new = NewMemory(
                agent, "", "", text, "{}", f"2026-01-01T00:00:{i % 60:02d}+00:00", "{}", "", None
            )
            ids.append(memory_sql.insert(conn, new))
    return ids


def insert_episodes(tools: Any, pairs: list[tuple[str, str]], agent: str = "alice") -> list[int]:
    with tools.engine.db.atomic() as conn:
        return [
            episode_sql.insert(conn, NewEpisode(agent, "", s, k, None, None, False, "", None))
            for s, k in pairs
        ]


async def ids(tools: Any, tool: str = "list_memories", **args: Any) -> list[int]:
    out = await tools(tool, args)
    key = "memories" if tool == "list_memories" else "episodes"
    assert "ok" not in out and out["count"] == len(out[key])
    return [r["id"] for r in out[key]]


async def test_list_memories_shape_and_order(tools):
    a = await store(tools, "one")
    b = await store(tools, "two", agent="bob")
    out = await tools("list_memories", {})
    assert set(out) == {"memories", "count"}
    assert out["count"] == 2
    assert [r["id"] for r in out["memories"]] == [b, a]
    assert all(set(r) == MEMORY_KEYS for r in out["memories"])


async def test_list_memories_agent_axis(tools):
    a = await store(tools, "alice's")
    b = await store(tools, "bob's", agent="bob")
    e = await store(tools, "nobody's", agent="")
    assert await ids(tools, agent_id="alice") == [a]
    assert await ids(tools, agent_id="bob") == [b]
    # '' and omitted list every agent (surface.md §6.3).
    assert await ids(tools, agent_id="") == [e, b, a]
    assert await ids(tools) == [e, b, a]
    assert await ids(tools, agent_id="carol") == []


async def test_list_memories_project_axis(tools):
    glob = await store(tools, "global")
    in_x = await store(tools, "in x", project_id="x")
    in_y = await store(tools, "in y", project_id="y")
    assert await ids(tools, agent_id="alice") == [in_y, in_x, glob]  # omitted: no filter
    assert await ids(tools, agent_id="alice", project_id="") == [glob]  # global pool only
    assert await ids(tools, agent_id="alice", project_id="x") == [in_x, glob]  # X + global
    assert await ids(tools, agent_id="alice", project_id="z") == [glob]


async def test_list_episodes_axes(tools):
    async def archive(agent: str, project: str = "") -> int:
        out = await tools(
            "archive_episode",
            {"agent_id": agent, "summary": f"{agent} {project}", "project_id": project},
        )
        return out["episode_id"]

    glob = await archive("alice")
    in_x = await archive("alice", "x")
    bob = await archive("bob")
    out = await tools("list_episodes", {})
    assert set(out) == {"episodes", "count"} and out["count"] == 3
    assert await ids(tools, "list_episodes") == [bob, in_x, glob]
    assert await ids(tools, "list_episodes", agent_id="alice") == [in_x, glob]
    assert await ids(tools, "list_episodes", agent_id="alice", project_id="") == [glob]
    assert await ids(tools, "list_episodes", agent_id="alice", project_id="x") == [in_x, glob]
    assert await ids(tools, "list_episodes", agent_id="bob", project_id="x") == [bob]


async def test_auto_project_is_literal_and_echoed(tools):
    auto = await store(tools, "auto", project_id="@auto")
    glob = await store(tools, "global")
    out = await tools("list_memories", {"agent_id": "alice", "project_id": "@auto"})
    assert out["resolved_project_id"] == "@auto"
    assert [r["id"] for r in out["memories"]] == [glob, auto]
    out = await tools("list_episodes", {"agent_id": "alice", "project_id": "@auto"})
    assert out == {"episodes": [], "count": 0, "resolved_project_id": "@auto"}


async def test_list_memories_limits(tools):
    all_ids = insert_memories(tools, [f"row {i}" for i in range(502)])
    newest = list(reversed(all_ids))
    assert await ids(tools) == newest[:100]  # default 100
    assert await ids(tools, limit=3) == newest[:3]
    assert await ids(tools, limit=10_000) == newest[:500]  # clamped, no marker
    assert await ids(tools, limit=0) == []
    assert await ids(tools, limit=-5) == []
    out = await tools("list_memories", {"limit": 501})
    assert set(out) == {"memories", "count"} and out["count"] == 500


async def test_list_episodes_limits(tools):
    all_ids = insert_episodes(tools, [(f"ep {i}", "") for i in range(202)])
    newest = list(reversed(all_ids))
    assert await ids(tools, "list_episodes") == newest[:50]
    assert await ids(tools, "list_episodes", limit=300) == newest[:200]
    assert await ids(tools, "list_episodes", limit=-1) == []


async def test_list_memories_budget_degrades_rows_after_the_millionth_character(tools):
    big = 400_000
    oldest, middle, newest = insert_memories(tools, ["a" * big, "b" * big, "c" * big])
    tiny = insert_memories(tools, ["tiny"])[0]
    out = await tools("list_memories", {})
    rows = {r["id"]: r for r in out["memories"]}
    assert out["budget_chars"] == 1_000_000
    assert [r["id"] for r in out["memories"]] == [tiny, newest, middle, oldest]
    assert set(rows[tiny]) == MEMORY_KEYS and set(rows[newest]) == MEMORY_KEYS
    assert set(rows[middle]) == MEMORY_KEYS
    assert rows[newest]["content"] == "c" * big and rows[middle]["content"] == "b" * big
    # 4 + 400k + 400k fit; the third 400k row would pass 1,000,000: cut to a pure prefix.
    assert rows[oldest] == {
        **rows[oldest],
        "content": "a" * 500,
        "content_truncated": True,
        "content_len": big,
        "ref": f"mem:{oldest}",
    }
    assert set(rows[oldest]) == MEMORY_KEYS | {"content_truncated", "content_len", "ref"}


async def test_list_memories_budget_spares_short_rows_and_the_first_row(connect):
    async with connect(recall_preview_chars=10) as tools:
        first_ids = insert_memories(tools, ["short", "s" * 20, "o" * 1_000_001])
        out = await tools("list_memories", {})
        rows = out["memories"]
        # Newest first: the 1,000,001-character row is admitted whole because it is first.
        assert [r["id"] for r in rows] == list(reversed(first_ids))
        assert len(rows[0]["content"]) == 1_000_001 and "content_truncated" not in rows[0]
        assert rows[1]["content"] == "s" * 10 and rows[1]["content_len"] == 20
        assert rows[1]["ref"] == f"mem:{first_ids[1]}"
        # Every later row is degraded only when longer than the preview cap.
        assert rows[2]["content"] == "short" and "content_truncated" not in rows[2]
        assert out["budget_chars"] == 1_000_000


async def test_list_memories_preview_zero_disables_the_budget(connect):
    async with connect(recall_preview_chars=0) as tools:
        insert_memories(tools, ["a" * 600_000, "b" * 600_000])
        out = await tools("list_memories", {})
        assert "budget_chars" not in out
        assert [len(r["content"]) for r in out["memories"]] == [600_000, 600_000]


async def test_list_memories_under_budget_has_no_marker(connect):
    async with connect(recall_preview_chars=5) as tools:
        insert_memories(tools, ["x" * 500_000, "y" * 500_000])  # exactly 1,000,000
        out = await tools("list_memories", {})
        assert "budget_chars" not in out
        assert all("content_truncated" not in r for r in out["memories"])


async def test_list_episodes_budget_counts_summary_and_keywords(tools):
    first, second, third = insert_episodes(
        tools, [("s" * 300_000, "k" * 100_000), ("t" * 300_000, "l" * 100), ("u" * 399_000, "")]
    )
    out = await tools("list_episodes", {})
    assert out["budget_chars"] == 800_000
    rows = {r["id"]: r for r in out["episodes"]}
    # third (399k) + second (300.1k) fit in 800k; first (400k) would not.
    assert "ref" not in rows[third] and "ref" not in rows[second]
    assert rows[first]["summary"] == "s" * 500 and rows[first]["keywords"] == "k" * 500
    assert rows[first]["summary_truncated"] is True and rows[first]["summary_len"] == 300_000
    assert rows[first]["keywords_truncated"] is True and rows[first]["keywords_len"] == 100_000
    assert rows[first]["ref"] == f"ep:{first}"


async def test_list_episodes_degrades_only_the_long_field(connect):
    async with connect(recall_preview_chars=10) as tools:
        a, b = insert_episodes(tools, [("short sum", "k" * 50), ("z" * 800_001, "")])
        out = await tools("list_episodes", {})
        rows = {r["id"]: r for r in out["episodes"]}
        assert "ref" not in rows[b] and len(rows[b]["summary"]) == 800_001
        assert rows[a]["summary"] == "short sum" and "summary_truncated" not in rows[a]
        assert rows[a]["keywords"] == "k" * 10 and rows[a]["keywords_len"] == 50
        assert rows[a]["ref"] == f"ep:{a}"


async def test_source_that_is_not_json_lists_as_an_empty_object(tools):
    with tools.engine.db.atomic() as conn:
        new = NewMemory("a", "", "", "legacy", "not json", "t", "{}", "", None)
        mid = memory_sql.insert(conn, new)
        new = NewMemory("a", "", "", "null source", "null", "t", "{}", "", None)
        nid = memory_sql.insert(conn, new)
    rows = {r["id"]: r for r in (await tools("list_memories", {}))["memories"]}
    assert rows[mid]["source"] == {} and rows[nid]["source"] == {}


async def test_integral_float_limit_reads_as_the_default(tools):
    # 3.0 passes the schema's integer check, then the coercer reads it as the default (§1.2).
    all_ids = insert_memories(tools, [f"row {i}" for i in range(120)])
    assert len(await ids(tools, limit=3.0)) == 100
    assert len(await ids(tools, "list_episodes", limit=2.0)) == 0
    assert len(all_ids) == 120
