"""migrate_channel_axis: the dry run (the default) reports and changes nothing; a real run moves
recoverable `discord` rows to their channel and nothing else, is idempotent, leaves colliding
rows alone, and globalizes the unrecoverable ones only when asked."""

from __future__ import annotations

import pytest
from support.mcp_client import Tools

pytestmark = pytest.mark.anyio


async def discord_corpus(tools: Tools) -> dict[str, int]:
    ids: dict[str, int] = {}
    for content, session in [
        ("user-thread msg", "111:222:0"),
        ("thread shared msg", "111:shared"),
        ("other channel msg", "333:444:1"),
        ("no session id", None),
        ("non snowflake", "chat:abc"),
        ("bad metadata", "999:1:1"),
        ("collides in 111", "111:9:9"),
    ]:
        metadata = {"session_id": session} if session else {}
        out = await tools(
            "store",
            {
                "agent_id": "a",
                "channel": "discord",
                "message": {"content": content, "metadata": metadata},
            },
        )
        ids[content] = out["id"]
    tools.execute("UPDATE memories SET metadata = '{not json' WHERE id = ?", (ids["bad metadata"],))
    # Already in channel 111 with the same text: the recovered row would duplicate it.
    out = await tools(
        "store", {"agent_id": "a", "channel": "111", "message": {"content": "collides in 111"}}
    )
    ids["already in 111"] = out["id"]
    await tools(
        "store",
        {
            "agent_id": "b",
            "channel": "discord",
            "message": {"content": "b's row", "metadata": {"session_id": "5:5"}},
        },
    )
    return ids


def channels(tools: Tools, agent: str) -> dict[int, str]:
    rows = tools.engine.db.query("SELECT id, channel FROM memories WHERE agent_id = ?", (agent,))
    return {r["id"]: r["channel"] for r in rows}


async def test_portability_channels_dry_run_reports_and_changes_nothing(tools):
    ids = await discord_corpus(tools)
    before = tools.rows()
    out = await tools("migrate_channel_axis", {"agent_id": "a"})
    assert "ok" not in out
    assert out["dry_run"] is True and out["migrated"] == 0 and out["globalized"] == 0
    assert out["recoverable_total"] == 4
    assert out["recoverable_by_channel"] == [
        {"channel": "111", "count": 3},
        {"channel": "333", "count": 1},
    ]
    assert out["unrecoverable_total"] == 3
    assert out["invalid_metadata_total"] == 1
    assert out["invalid_metadata_ids"] == [ids["bad metadata"]]
    assert out["samples"][0] == {
        "id": ids["user-thread msg"],
        "recovered_channel": "111",
        "session_id": "111:222:0",
    }
    assert len(out["samples"]) == 4
    everyone = await tools(
        "migrate_channel_axis", {"agent_id": "", "globalize_unrecoverable": True}
    )
    assert everyone["recoverable_total"] == 5 and everyone["globalized"] == 0
    assert tools.rows() == before


async def test_portability_channels_real_run(tools):
    ids = await discord_corpus(tools)
    b_before = channels(tools, "b")
    out = await tools("migrate_channel_axis", {"agent_id": "a", "dry_run": False})
    assert out["dry_run"] is False and out["migrated"] == 3 and out["globalized"] == 0
    after = {name: channels(tools, "a")[i] for name, i in ids.items()}
    assert after["user-thread msg"] == "111" and after["thread shared msg"] == "111"
    assert after["other channel msg"] == "333"
    assert after["collides in 111"] == "discord"  # its new identity already exists: left
    assert after["already in 111"] == "111"
    assert after["no session id"] == "discord" and after["bad metadata"] == "discord"
    assert channels(tools, "b") == b_before
    found = await tools("recall", {"agent_id": "a", "query": "other channel msg", "channel": "333"})
    assert any(m["content"] == "other channel msg" for m in found["messages"])

    again = await tools("migrate_channel_axis", {"agent_id": "a", "dry_run": False})
    assert again["migrated"] == 0 and again["recoverable_total"] == 1  # the collision stays

    out = await tools(
        "migrate_channel_axis", {"agent_id": "a", "dry_run": False, "globalize_unrecoverable": True}
    )
    assert out["globalized"] == 3
    after = {name: channels(tools, "a")[i] for name, i in ids.items()}
    assert after["no session id"] == after["non snowflake"] == after["bad metadata"] == ""
    assert after["collides in 111"] == "discord"
