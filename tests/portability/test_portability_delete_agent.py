"""delete_agent_data: every row of one agent goes (locked memories, episodes, profile, pending
tasks, in every project and channel), nothing of another agent does, its calibration is dropped,
and a recall for it is empty at once."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.mcp_client import Tools

pytestmark = pytest.mark.anyio


async def populate(tools: Tools, agent: str, n: int = 12) -> None:
    for i in range(n):
        out = await tools(
            "store",
            {
                "agent_id": agent,
                "project_id": ("", "p1")[i % 2],
                "channel": ("", "c1", "c2")[i % 3],
                "message": {
                    "id": f"{agent}-{i}",
                    "content": f"{agent} fact number {i} about kettles",
                },
            },
        )
        assert out["result"] == "stored", out
        if i == 0:
            assert (await tools("lock_memory", {"memory_id": out["id"], "agent_id": agent}))["ok"]
    for where in ("", "p1"):
        out = await tools(
            "archive_episode",
            {
                "agent_id": agent,
                "project_id": where,
                "summary": f"{agent} session in {where or 'global'}",
            },
        )
        assert out["ok"]
    assert (await tools("update_profile", {"agent_id": agent, "profile": f"{agent}'s profile"}))[
        "ok"
    ]
    tools.execute(
        "INSERT INTO pending_memory_tasks (task_type, agent_id, payload) VALUES (?, ?, '{}')",
        ("update_profile", agent),
    )


def agent_rows(tools: Tools, agent: str) -> dict[str, list[tuple[object, ...]]]:
    return {t: [r for r in rows if agent in r] for t, rows in tools.rows().items()}


def deleted(agent: str, **counts: int) -> dict[str, object]:
    """`delete_agent_data`'s answer: `deleted_<kind>` for each count."""
    return {"ok": True, "agent_id": agent, **{f"deleted_{k}": n for k, n in counts.items()}}


async def test_portability_delete_agent_removes_everything_of_one_agent(tools, tmp_path: Path):
    await populate(tools, "alice")
    await populate(tools, "bob")
    out = await tools("set_recall_precision", {"agent_id": "alice", "precision": "strict"})
    assert out["ok"], out
    sidecar = Path(tools.engine.settings.db_path + ".calibration.json")
    # No calibration file on PostgreSQL (kept in memory there, docs/compatibility.md).
    on_file = tools.engine.db.dialect == "sqlite"
    assert not on_file or "alice" in json.loads(sidecar.read_text())["agent_betas"]
    bob_before = agent_rows(tools, "bob")
    bob_recall = await tools("recall", {"agent_id": "bob", "query": "kettles fact number 3"})

    out = await tools("delete_agent_data", {"agent_id": "alice"})
    assert out == deleted("alice", memories=12, profiles=1, episodes=2, pending_tasks=1)

    assert agent_rows(tools, "alice") == {
        "memories": [],
        "episodes": [],
        "profiles": [],
        "pending_memory_tasks": [],
    }
    assert agent_rows(tools, "bob") == bob_before
    gone = await tools("recall", {"agent_id": "alice", "query": "kettles fact number 3"})
    assert gone["messages"] == []
    assert (await tools("list_memories", {"agent_id": "alice"}))["count"] == 0
    assert (await tools("get_profile", {"agent_id": "alice"}))["profile"] == ""
    assert (
        await tools("recall", {"agent_id": "bob", "query": "kettles fact number 3"}) == bob_recall
    )
    precision = await tools("get_recall_precision", {"agent_id": "alice"})
    assert precision["overridden"] is False
    assert not on_file or "alice" not in json.loads(sidecar.read_text())["agent_betas"]

    again = await tools("delete_agent_data", {"agent_id": "alice"})
    assert again == deleted("alice", memories=0, profiles=0, episodes=0, pending_tasks=0)


async def test_portability_delete_agent_requires_agent_id(tools):
    await populate(tools, "", n=2)  # the empty-agent bucket is real data; '' must not wipe it
    before = tools.rows()
    out = await tools("delete_agent_data", {"agent_id": ""})
    assert out == {"ok": False, "error": "agent_id is required for bulk deletion"}
    assert tools.rows() == before
