"""The operating-context file and the project gate of the six project tools (§6.6, §13.3, §4.3)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.anyio

OC = """
version = 1
context_revision = "{rev}"

[instructions]
summary = "Use project alpha for deploy notes."

[registry]
project_ids = ["alpha", "beta"]
enforce = "{enforce}"

[defaults]
a = "alpha"

[[doctrine]]
name = "style"
body = "Write short notes."

[[doctrine]]
name = "deploy"
body = "Deploys happen on Tuesdays."
"""


def write_oc(path: Path, enforce: str = "warn", rev: str = "r7", text: str | None = None) -> None:
    path.write_text(OC.format(enforce=enforce, rev=rev) if text is None else text)
    # Make the change visible to an mtime check even on a coarse-grained filesystem clock.
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))


def _store(
    project: str, agent: str = "a", content: str = "a note", key: str = ""
) -> dict[str, Any]:
    return {
        "agent_id": agent,
        "message": {"content": content},
        "project_id": project,
        "session_key": key,
    }


def _projects(tools: Any) -> list[str]:
    return [r[0] for r in tools.engine.db.query("SELECT project_id FROM memories ORDER BY id")]


async def test_oc_dormant_without_file_passes_auto_literally(tools: Any, oc_path: Path) -> None:
    out = await tools("store", _store("@auto"))
    assert out["result"] == "stored" and out["resolved_project_id"] == "@auto"
    assert "operating_context_warning" not in out
    assert _projects(tools) == ["@auto"]
    listed = await tools("list_memories", {"project_id": "@auto"})
    assert listed["count"] == 1 and listed["resolved_project_id"] == "@auto"
    recalled = await tools("recall", {"agent_id": "a", "query": "note", "project_id": "@auto"})
    assert recalled["resolved_project_id"] == "@auto"
    assert await tools("get_operating_context") == {
        "ok": False,
        "enabled": False,
        "error": f"operating context is dormant — no sidecar file at {oc_path}",
    }


async def test_oc_kill_switch_and_broken_file_are_dormant(connect: Any, oc_path: Path) -> None:
    write_oc(oc_path, enforce="reject")
    async with connect(operating_context="OFF") as tools:
        out = await tools("get_operating_context")
        assert out["error"] == (
            "operating context is dormant — disabled (CPERSONA_OPERATING_CONTEXT=off)"
        )
        assert (await tools("store", _store("gamma")))["result"] == "stored"
    write_oc(oc_path, text="version = 1\n[registry\nproject_ids = [")
    async with connect() as tools:
        assert tools.client.instructions is None
        out = await tools("get_operating_context")
        assert out["ok"] is False and out["error"].startswith(
            "operating context is dormant — sidecar unusable: "
        )
        assert (await tools("store", _store("gamma", content="second")))["result"] == "stored"
    write_oc(oc_path, text="version = 2\n")
    async with connect() as tools:
        assert "version must be the integer 1" in (await tools("get_operating_context"))["error"]


async def test_oc_auto_resolution_and_registry_warnings(connect: Any, oc_path: Path) -> None:
    write_oc(oc_path)
    async with connect() as tools:
        out = await tools("store", _store("@auto"))
        assert out["result"] == "stored" and out["resolved_project_id"] == "alpha"
        assert "operating_context_warning" not in out
        out = await tools("store", _store("@auto", agent="z", content="unmapped"))
        assert out["resolved_project_id"] == ""
        assert out["operating_context_warning"] == (
            "@auto has no [defaults] mapping for agent_id 'z' (rev r7); resolved to '' "
            "(global pool)"
        )
        out = await tools("store", _store("gamma", content="foreign"))
        assert out["result"] == "stored"
        assert out["operating_context_warning"] == "project_id 'gamma' not in registry (rev r7)"
        out = await tools("store", _store("", content="global"))
        assert "operating_context_warning" not in out and "resolved_project_id" not in out
        assert _projects(tools) == ["alpha", "", "gamma", ""]
        episode = await tools(
            "archive_episode", {"agent_id": "a", "summary": "s", "project_id": "@auto"}
        )
        assert episode["ok"] and episode["resolved_project_id"] == "alpha"
        listed = await tools("list_memories", {"agent_id": "a", "project_id": "@auto"})
        assert listed["resolved_project_id"] == "alpha"
        assert {m["project_id"] for m in listed["memories"]} == {"alpha", ""}
        eps = await tools("list_episodes", {"agent_id": "a", "project_id": "gamma"})
        assert eps["operating_context_warning"] == "project_id 'gamma' not in registry (rev r7)"
        recalled = await tools(
            "recall_with_context", {"agent_id": "a", "query": "note", "project_id": "@auto"}
        )
        assert recalled["resolved_project_id"] == "alpha"


async def test_oc_reject_mode_refuses_writes_only(connect: Any, oc_path: Path) -> None:
    write_oc(oc_path, enforce="reject")
    async with connect() as tools:
        before = tools.rows()
        out = await tools("store", _store("gamma"))
        assert out == {
            "ok": False,
            "error": "project_id 'gamma' not in registry (rev r7)",
            "operating_context_revision": "r7",
            "result": "rejected",
            "reason": "project_id 'gamma' not in registry (rev r7)",
        }
        out = await tools(
            "archive_episode", {"agent_id": "z", "summary": "s", "project_id": "@auto"}
        )
        assert out == {
            "ok": False,
            "error": "@auto has no [defaults] mapping for agent_id 'z' "
            "(rev r7); resolved to '' (global pool)",
            "operating_context_revision": "r7",
            "episode_id": None,
        }
        assert tools.rows() == before
        # An OC refusal wins over a pause (surface.md §1.5).
        await tools("pause_persistence", {"session_key": "k"})
        paused = await tools("store", _store("gamma", key="k"))
        assert paused["result"] == "rejected" and "persisted" not in paused
        assert (await tools("store", _store("alpha", key="k")))["persisted"] is False
        # Reads never refuse: they warn.
        listed = await tools("list_memories", {"project_id": "gamma"})
        assert listed["count"] == 0 and "operating_context_warning" in listed
        recalled = await tools("recall", {"agent_id": "a", "query": "x", "project_id": "gamma"})
        assert recalled["messages"] == [] and "operating_context_warning" in recalled


async def test_oc_enforce_off_is_silent(connect: Any, oc_path: Path) -> None:
    write_oc(oc_path, enforce="off")
    async with connect() as tools:
        out = await tools("store", _store("@auto", agent="z"))
        assert out["resolved_project_id"] == "" and "operating_context_warning" not in out
        assert "operating_context_warning" not in await tools("store", _store("gamma"))


async def test_oc_file_is_reread_when_it_changes(connect: Any, oc_path: Path) -> None:
    write_oc(oc_path, rev="r1")
    async with connect() as tools:
        assert tools.client.instructions == "Use project alpha for deploy notes."
        assert (await tools("get_operating_context"))["context_revision"] == "r1"
        write_oc(oc_path, enforce="reject", rev="r2-longer")
        out = await tools("store", _store("gamma"))
        assert out["ok"] is False and out["operating_context_revision"] == "r2-longer"
        oc_path.unlink()
        assert (await tools("store", _store("gamma")))["result"] == "stored"
        # initialize.instructions was read once, at start.
        assert tools.engine.instructions == "Use project alpha for deploy notes."


async def test_get_operating_context_preview_and_sections(connect: Any, oc_path: Path) -> None:
    write_oc(oc_path)
    async with connect() as tools:
        assert await tools("get_operating_context") == {
            "ok": True,
            "context_revision": "r7",
            "instructions_summary": "Use project alpha for deploy notes.",
            "registry": {"project_ids": ["alpha", "beta"], "enforce": "warn"},
            "defaults": {"a": "alpha"},
            "doctrine_sections": ["deploy", "style"],
        }
        assert await tools("get_operating_context", {"section": "deploy"}) == {
            "ok": True,
            "context_revision": "r7",
            "section": "deploy",
            "body": "Deploys happen on Tuesdays.",
        }
        assert await tools("get_operating_context", {"section": "nope"}) == {
            "ok": False,
            "error": "unknown doctrine section 'nope'",
            "doctrine_sections": ["deploy", "style"],
        }
