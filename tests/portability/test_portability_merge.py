"""merge_memories copy vs move: duplicates skipped keeping the target's version, locked rows
copied locked and moved (a lock does not stop a move), exactly the copied rows leave the source,
a dry run predicts and changes nothing, and a failure midway leaves both agents unchanged."""

from __future__ import annotations

from typing import Any

import pytest
from support.mcp_client import Tools

pytestmark = pytest.mark.anyio


async def store(tools: Tools, agent: str, content: str, **kw: Any) -> int:
    msg = {
        "content": content,
        **({"id": kw.pop("msg_id")} if "msg_id" in kw else {}),
        **kw.pop("message", {}),
    }
    out = await tools("store", {"agent_id": agent, "message": msg, **kw})
    assert out["result"] == "stored", out
    return int(out["id"])


async def corpus(tools: Tools) -> dict[str, int]:
    ids = {
        "m1": await store(
            tools,
            "alice",
            "alice's m1 text",
            msg_id="m1",
            project_id="p1",
            channel="c1",
            message={"metadata": {"k": 1}, "timestamp": "2026-10-01T00:00:00+09:00"},
        ),
        "m2": await store(tools, "alice", "shared fact"),
        "m3": await store(tools, "alice", "locked secret", project_id="p2"),
        "m4": await store(tools, "alice", "only alice knows this"),
    }
    assert (await tools("lock_memory", {"memory_id": ids["m3"], "agent_id": "alice"}))["ok"]
    for summary in ("alice session one", "common session"):
        assert (await tools("archive_episode", {"agent_id": "alice", "summary": summary}))["ok"]
    assert (await tools("update_profile", {"agent_id": "alice", "profile": "alice profile"}))["ok"]
    # bob already holds: msg_id m1 in p1 (other text), the shared fact, the common session.
    await store(tools, "bob", "bob's own m1", msg_id="m1", project_id="p1", channel="c9")
    await store(tools, "bob", "shared fact")
    assert (await tools("archive_episode", {"agent_id": "bob", "summary": "common session"}))["ok"]
    assert (await tools("update_profile", {"agent_id": "bob", "profile": "bob profile"}))["ok"]
    tools.execute(
        "INSERT INTO pending_memory_tasks (task_type, agent_id, payload) "
        "VALUES ('update_profile', 'alice', '{}')"
    )
    return ids


def of(tools: Tools, agent: str) -> dict[str, list[tuple[Any, ...]]]:
    rows = tools.rows()
    return {t: [r for r in v if agent in r] for t, v in rows.items()}


def memories(tools: Tools, agent: str) -> dict[str, Any]:
    rows = tools.engine.db.query(
        "SELECT content, project_id, channel, msg_id, metadata, timestamp, locked, created_at, "
        "embedding FROM memories WHERE agent_id = ?",
        (agent,),
    )
    return {r["content"]: tuple(r)[1:] for r in rows}


async def test_portability_merge_copy_skips_duplicates_and_keeps_source(tools):
    await corpus(tools)
    alice_before = of(tools, "alice")
    bob_before = memories(tools, "bob")
    args = {"source_agent_id": "alice", "target_agent_id": "bob"}
    preview = await tools("merge_memories", {**args, "dry_run": True})
    out = await tools("merge_memories", args)
    assert out == {
        "ok": True,
        "dry_run": False,
        "source_agent_id": "alice",
        "target_agent_id": "bob",
        "strategy": "skip",
        "mode": "copy",
        "merged_memories": 2,
        "skipped_memories": 2,
        "merged_episodes": 1,
        "skipped_episodes": 1,
        "profile_copied": False,
        "skipped_profile": True,
    }
    assert {**preview, "dry_run": False} == out
    assert of(tools, "alice") == alice_before  # a copy leaves the source alone
    bob = memories(tools, "bob")
    alice = memories(tools, "alice")
    # The target's versions were kept; the copies are verbatim, lock and vector included.
    assert bob["bob's own m1"] == bob_before["bob's own m1"]
    assert bob["locked secret"] == alice["locked secret"] and bob["locked secret"][5] == 1
    assert bob["only alice knows this"] == alice["only alice knows this"]
    assert "alice's m1 text" not in bob
    assert (await tools("get_profile", {"agent_id": "bob"}))["profile"] == "bob profile"
    again = await tools("merge_memories", args)
    assert (again["merged_memories"], again["merged_episodes"]) == (0, 0)


async def test_portability_merge_move_into_empty_agent(tools):
    await corpus(tools)
    alice_rows = memories(tools, "alice")
    out = await tools(
        "merge_memories", {"source_agent_id": "alice", "target_agent_id": "carol", "mode": "move"}
    )
    assert out["ok"] and out["merged_memories"] == 4 and out["profile_copied"] is True
    assert out["source_deleted"] == {
        "ok": True,
        "agent_id": "alice",
        "deleted_memories": 4,
        "deleted_profiles": 1,
        "deleted_episodes": 2,
        "deleted_pending_tasks": 1,
    }
    assert out["left_at_source"] == {"memories": 0, "episodes": 0, "profiles": 0}
    assert of(tools, "alice") == {
        "memories": [],
        "episodes": [],
        "profiles": [],
        "pending_memory_tasks": [],
    }
    assert memories(tools, "carol") == alice_rows  # locked row included, still locked
    assert (await tools("get_profile", {"agent_id": "carol"}))["profile"] == "alice profile"
    found = await tools("recall", {"agent_id": "carol", "query": "only alice knows this"})
    assert any("only alice knows this" in m["content"] for m in found["messages"])
    gone = await tools("recall", {"agent_id": "alice", "query": "only alice knows this"})
    assert gone["messages"] == []


async def test_portability_merge_move_leaves_skipped_rows(tools):
    await corpus(tools)
    out = await tools(
        "merge_memories", {"source_agent_id": "alice", "target_agent_id": "bob", "mode": "move"}
    )
    assert out["source_deleted"] == {
        "ok": True,
        "agent_id": "alice",
        "deleted_memories": 2,
        "deleted_profiles": 0,
        "deleted_episodes": 1,
        "deleted_pending_tasks": 0,
    }
    assert out["left_at_source"] == {"memories": 2, "episodes": 1, "profiles": 1}
    assert set(memories(tools, "alice")) == {"alice's m1 text", "shared fact"}
    assert len(of(tools, "alice")["pending_memory_tasks"]) == 1  # the agent still exists


async def test_portability_merge_dry_run_changes_nothing(tools):
    await corpus(tools)
    before = tools.rows()
    for mode in ("copy", "move"):
        out = await tools(
            "merge_memories",
            {"source_agent_id": "alice", "target_agent_id": "bob", "mode": mode, "dry_run": True},
        )
        assert out["ok"] and out["dry_run"] is True and out["merged_memories"] == 2
        assert "source_deleted" not in out
    assert tools.rows() == before


@pytest.mark.parametrize("mode", ["copy", "move"])
async def test_portability_merge_failure_midway_changes_neither_agent(tools, mode):
    await corpus(tools)
    # Memories are copied first; the episode copy then fails inside the same transaction.
    if tools.engine.db.dialect == "sqlite":
        tools.execute(
            "CREATE TRIGGER fail_merge BEFORE INSERT ON episodes WHEN new.agent_id = 'carol' "
            "BEGIN SELECT RAISE(ABORT, 'disk on fire'); END"
        )
    else:
        tools.execute(
            "CREATE FUNCTION fail_merge() RETURNS trigger LANGUAGE plpgsql AS "
            "$$ BEGIN RAISE EXCEPTION 'disk on fire'; END $$"
        )
        tools.execute(
            "CREATE TRIGGER fail_merge BEFORE INSERT ON episodes FOR EACH ROW "
            "WHEN (new.agent_id = 'carol') EXECUTE FUNCTION fail_merge()"
        )
    before = tools.rows()
    out = await tools(
        "merge_memories", {"source_agent_id": "alice", "target_agent_id": "carol", "mode": mode}
    )
    assert out["ok"] is False
    assert out["error"] == "merge aborted and rolled back: disk on fire"
    assert (out["merged_memories"], out["merged_episodes"], out["profile_copied"]) == (0, 0, False)
    assert tools.rows() == before


async def test_portability_merge_validation(tools):
    cases = [
        ({"source_agent_id": "", "target_agent_id": "b"}, "source_agent_id is required"),
        ({"source_agent_id": "a", "target_agent_id": ""}, "target_agent_id is required"),
        (
            {"source_agent_id": "a", "target_agent_id": "a"},
            "source_agent_id and target_agent_id must differ",
        ),
        (
            {"source_agent_id": "a", "target_agent_id": "b", "strategy": "overwrite"},
            "Unsupported strategy 'overwrite'. Currently supported: 'skip'",
        ),
        (
            {"source_agent_id": "a", "target_agent_id": "b", "mode": "swap"},
            "Invalid mode 'swap'. Supported: 'copy', 'move'",
        ),
    ]
    for args, error in cases:
        assert await tools("merge_memories", args) == {"ok": False, "error": error}
