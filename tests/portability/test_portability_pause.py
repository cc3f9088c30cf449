"""The portability tools under a persistence pause (surface.md §10.3, §1.5): argument checks
first, then no write; dry runs and exports run as usual."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.anyio

KEY = "paused-session"


async def test_portability_pause_skips_writes_but_not_previews(tools, export_dir):
    await tools(
        "store",
        {
            "agent_id": "a",
            "channel": "discord",
            "message": {"content": "filed under the bridge", "metadata": {"session_id": "42:1:0"}},
        },
    )
    await tools("export_memories", {"agent_id": "a", "output_path": "a.jsonl"})
    await tools("pause_persistence", {"session_key": KEY})
    before = tools.rows()

    out = await tools(
        "import_memories", {"input_path": "a.jsonl", "target_agent_id": "b", "session_key": KEY}
    )
    assert out["ok"] is True and out["persisted"] is False and out["dry_run"] is True
    assert out["imported_memories"] == 0 and "`import_memories` skipped" in out["reason"]
    refused = await tools("import_memories", {"input_path": "../a.jsonl", "session_key": KEY})
    assert refused["ok"] is False and "persisted" not in refused  # validated before the pause
    preview = await tools(
        "import_memories",
        {"input_path": "a.jsonl", "target_agent_id": "b", "dry_run": True, "session_key": KEY},
    )
    assert preview["imported_memories"] == 1 and "persisted" not in preview

    merge = await tools(
        "merge_memories", {"source_agent_id": "a", "target_agent_id": "a", "session_key": KEY}
    )
    assert merge == {"ok": False, "error": "source_agent_id and target_agent_id must differ"}
    merge = await tools(
        "merge_memories",
        {"source_agent_id": "a", "target_agent_id": "b", "dry_run": True, "session_key": KEY},
    )
    assert merge["merged_memories"] == 1 and "persisted" not in merge

    migrate = await tools(
        "migrate_channel_axis", {"agent_id": "a", "dry_run": False, "session_key": KEY}
    )
    assert migrate["dry_run"] is True and migrate["migrated"] == 0
    assert migrate["recoverable_total"] == 1 and migrate["repairs_skipped"] is True
    assert "persisted" not in migrate and "ok" not in migrate
    assert tools.rows() == before

    out = await tools(
        "export_memories", {"agent_id": "", "output_path": "paused.jsonl", "session_key": KEY}
    )
    assert out["ok"] and (export_dir / "paused.jsonl").exists()
    # Another session is not paused.
    out = await tools(
        "import_memories", {"input_path": "a.jsonl", "target_agent_id": "b", "session_key": "other"}
    )
    assert out["imported_memories"] == 1
