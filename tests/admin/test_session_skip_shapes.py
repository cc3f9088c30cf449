"""Every write tool while paused: its documented skip shape, and nothing written (§10.3, §1.5)."""

from __future__ import annotations

import os
from typing import Any

import pytest

pytestmark = pytest.mark.anyio

KEY = "paused-session"
PAUSE_MARKERS = {"persisted": False, "dry_run": True}


async def _corpus(tools: Any) -> dict[str, int]:
    ids = []
    for i in range(12):
        out = await tools(
            "store",
            {
                "agent_id": "a",
                "message": {
                    "content": f"note {i}: the deploy pipeline step {i} uses cache layer {i % 3}"
                },
            },
        )
        ids.append(out["id"])
    await tools("lock_memory", {"memory_id": ids[1]})
    episode = await tools("archive_episode", {"agent_id": "a", "summary": "a session"})
    await tools("update_profile", {"agent_id": "a", "profile": "likes tea"})
    return {"memory": ids[0], "locked": ids[1], "episode": episode["episode_id"]}


def _cases(ids: dict[str, int]) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(tool, arguments, the keys its skip shape must carry besides the pause markers)."""
    return [
        (
            "store",
            {"agent_id": "a", "message": {"content": "brand new"}},
            {"ok": True, "result": "skipped", "id": "no-persist", "embedded": False},
        ),
        (
            "archive_episode",
            {"agent_id": "a", "summary": "another session"},
            {"ok": True, "episode_id": None, "id": "no-persist", "queued": False, "task_id": None},
        ),
        (
            "update_memory",
            {"memory_id": ids["memory"], "content": "changed"},
            {"ok": True, "updated_id": None},
        ),
        (
            "delete_memory",
            {"memory_id": ids["memory"], "agent_id": "a"},
            {"ok": True, "deleted_id": None},
        ),
        ("lock_memory", {"memory_id": ids["memory"]}, {"ok": True, "locked_id": None}),
        ("unlock_memory", {"memory_id": ids["locked"]}, {"ok": True, "unlocked_id": None}),
        ("delete_episode", {"episode_id": ids["episode"]}, {"ok": True, "deleted_id": None}),
        (
            "update_profile",
            {"agent_id": "a", "profile": "likes coffee"},
            {"ok": True, "profiles_updated": 0},
        ),
        (
            "calibrate_threshold",
            {"agent_id": "a"},
            {"ok": True, "sidecar_persisted": False, "new_threshold": None},
        ),
        (
            "set_recall_precision",
            {"agent_id": "a", "precision": "strict"},
            {
                "ok": True,
                "agent_id": "a",
                "precision": "strict",
                "fused_gate": None,
                "calibrate": None,
            },
        ),
    ]


#: Write tools of the portability group: checked once they are registered.
OTHER_CASES = [
    (
        "delete_agent_data",
        {"agent_id": "a"},
        {
            "ok": True,
            "agent_id": "a",
            "deleted_memories": 0,
            "deleted_profiles": 0,
            "deleted_episodes": 0,
            "deleted_pending_tasks": 0,
        },
    ),
    (
        "merge_memories",
        {"source_agent_id": "a", "target_agent_id": "b", "mode": "move"},
        {"ok": True},
    ),
]


async def test_skip_shapes_write_nothing(tools: Any) -> None:
    ids = await _corpus(tools)
    registered = set(await tools.names())
    sidecar = tools.engine.settings.db_path + ".calibration.json"
    before = tools.rows()
    tools.engine.pause.clock = lambda: 1_700_000_000.0  # time stands still: "10m left"
    await tools("pause_persistence", {"session_key": KEY, "ttl_seconds": 600})
    checked = []
    for tool, args, expected in _cases(ids):
        assert tool in registered
        out = await tools(tool, {**args, "session_key": KEY})
        for key, value in {**expected, **PAUSE_MARKERS}.items():
            assert out.get(key, "<absent>") == value, (tool, key, out)
        assert out["reason"] == (
            "session no-persist mode active (10m left) — "
            f"`{tool}` skipped. Call `resume_persistence` to re-enable, or wait for TTL "
            "to elapse."
        ), tool
        assert tools.rows() == before, tool
        checked.append(tool)
    assert not os.path.exists(sidecar)
    assert {
        "store",
        "archive_episode",
        "update_memory",
        "delete_memory",
        "lock_memory",
        "unlock_memory",
        "delete_episode",
        "update_profile",
        "calibrate_threshold",
        "set_recall_precision",
    } <= set(checked)
    # The same calls from another session key write as usual.
    assert (
        await tools(
            "store", {"agent_id": "a", "message": {"content": "brand new"}, "session_key": "other"}
        )
    )["result"] == "stored"


@pytest.mark.parametrize(("tool", "args", "expected"), OTHER_CASES, ids=[c[0] for c in OTHER_CASES])
async def test_skip_shapes_of_portability_tools(
    tools: Any, tool: str, args: dict[str, Any], expected: dict[str, Any]
) -> None:
    assert tool in await tools.names(), f"{tool} is not registered"
    await _corpus(tools)
    before = tools.rows()
    await tools("pause_persistence", {"session_key": KEY})
    out = await tools(tool, {**args, "session_key": KEY})
    for key, value in {**expected, **PAUSE_MARKERS}.items():
        assert out.get(key, "<absent>") == value, (key, out)
    assert f"`{tool}` skipped" in out["reason"]
    assert tools.rows() == before


async def test_pause_wins_over_tool_validation(tools: Any) -> None:
    await tools("pause_persistence", {"session_key": KEY})
    empty = await tools("store", {"agent_id": "a", "message": {"content": ""}, "session_key": KEY})
    assert empty["result"] == "skipped" and empty["persisted"] is False
    assert (await tools("update_memory", {"memory_id": 999, "content": "  ", "session_key": KEY}))[
        "persisted"
    ] is False
    assert (await tools("delete_memory", {"memory_id": 999, "session_key": KEY}))["ok"]
    assert (await tools("archive_episode", {"agent_id": "a", "summary": "", "session_key": KEY}))[
        "ok"
    ]
    assert (await tools("update_profile", {"agent_id": "a", "profile": "", "session_key": KEY}))[
        "persisted"
    ] is False


async def test_calibration_validates_before_the_pause(tools: Any) -> None:
    await tools("pause_persistence", {"session_key": KEY})
    bad = await tools(
        "calibrate_threshold", {"agent_id": "a", "percentile": 500, "session_key": KEY}
    )
    assert bad["ok"] is False and "percentile" in bad["error"] and "persisted" not in bad
    bad = await tools(
        "set_recall_precision", {"agent_id": "a", "precision": "sloppy", "session_key": KEY}
    )
    assert bad["ok"] is False and "Unknown precision" in bad["error"]
    bad = await tools("set_recall_precision", {"agent_id": "", "session_key": KEY})
    assert bad == {"ok": False, "error": "agent_id is required"}


async def test_reads_answer_while_paused(tools: Any) -> None:
    await tools("store", {"agent_id": "a", "message": {"content": "the cache is warm"}})
    await tools("pause_persistence", {})
    assert (await tools("list_memories", {}))["count"] == 1
    recalled = await tools("recall", {"agent_id": "a", "query": "cache"})
    assert [m["content"] for m in recalled["messages"]] == ["the cache is warm"]
    assert (await tools("get_profile", {"agent_id": "a"})) == {"profile": ""}


async def test_paused_recall_does_not_count(connect: Any) -> None:
    async with connect(confidence_enabled=True) as tools:
        for i in range(4):
            await tools(
                "store",
                {
                    "agent_id": "a",
                    "message": {"content": f"kubernetes rollout number {i} finished"},
                },
            )

        def counts() -> list[int]:
            rows = tools.engine.db.query("SELECT recall_count FROM memories ORDER BY id")
            return [r[0] for r in rows]

        await tools("pause_persistence", {"session_key": KEY})
        out = await tools(
            "recall", {"agent_id": "a", "query": "kubernetes rollout", "session_key": KEY}
        )
        assert out["messages"]
        assert counts() == [0, 0, 0, 0]
        # Another bucket is not paused: its recall is counted.
        await tools(
            "recall", {"agent_id": "a", "query": "kubernetes rollout", "session_key": "other"}
        )
        assert sum(counts()) > 0
