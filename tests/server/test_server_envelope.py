"""The wire envelope (surface.md §1) and bad input: nothing changes, nothing crashes.

Schema violations answer `isError: true` with `Input validation error: ...`; an unknown tool
answers the bare `{"error": "Unknown tool: x"}`; handler refusals carry `ok: false` plus the
tool's documented collection keys; and after every bad call the database is as it was.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

pytestmark = pytest.mark.anyio

# The tools of issue 2 in registration order (the "#" column of surface.md §2).
TOOLS = [
    "store",
    "get_profile",
    "update_profile",
    "archive_episode",
    "list_memories",
    "list_episodes",
    "delete_memory",
    "delete_episode",
    "update_memory",
    "lock_memory",
    "unlock_memory",
]

# (read_only, destructive, idempotent) of surface.md §2; None = the hint is not set.
ANNOTATIONS = {
    "store": (False, False, True),
    "archive_episode": (False, False, False),
    "update_memory": (False, False, True),
    "lock_memory": (False, False, True),
    "unlock_memory": (False, False, True),
    "delete_memory": (False, True, True),
    "delete_episode": (False, True, True),
    "get_profile": (True, None, None),
    "update_profile": (False, False, None),
    "list_memories": (True, None, None),
    "list_episodes": (True, None, None),
}

REQUIRED = {
    "store": {"agent_id", "message"},
    "archive_episode": {"agent_id", "summary"},
    "update_memory": {"memory_id", "content"},
    "lock_memory": {"memory_id"},
    "unlock_memory": {"memory_id"},
    "delete_memory": {"memory_id"},
    "delete_episode": {"episode_id"},
    "get_profile": {"agent_id"},
    "update_profile": {"agent_id", "profile"},
    "list_memories": set(),
    "list_episodes": set(),
}


async def test_tool_list(tools):
    everything = (await tools.client.list_tools()).tools
    names = [t.name for t in everything]
    assert len(names) == len(set(names))
    listed = [t for t in everything if t.name in TOOLS]
    assert [t.name for t in listed] == TOOLS
    for tool in listed:
        schema = tool.input_schema
        assert schema["type"] == "object"
        assert set(schema.get("required", [])) == REQUIRED[tool.name]
        assert "additionalProperties" not in schema
        a = tool.annotations
        assert (a.read_only_hint, a.destructive_hint, a.idempotent_hint) == ANNOTATIONS[tool.name]
        assert tool.description


async def test_descriptions_quote_the_enforced_caps(connect):
    async with connect(max_content_length=1234, max_metadata_length=567) as tools:
        listed = {t.name: t.description for t in (await tools.client.list_tools()).tools}
        assert "1234" in listed["store"] and "567" in listed["store"]
        assert "1234" in listed["update_memory"]


WRITES_TEXT = ("store", "update_memory", "archive_episode", "update_profile", "import_memories")


@pytest.mark.parametrize("secrets", ["redact", "reject", "allow"])
async def test_descriptions_of_text_writes_say_the_credentials_policy(connect, secrets):
    async with connect(secrets=secrets) as tools:
        listed = {t.name: t.description for t in (await tools.client.list_tools()).tools}
    said = {name: "credentials" in listed[name].lower() for name in WRITES_TEXT}
    assert said == dict.fromkeys(WRITES_TEXT, secrets != "allow")
    if secrets == "redact":
        assert "`[REDACTED:<kind>]`" in listed["store"] and "`redacted`" in listed["store"]


async def test_server_identifies_itself(tools):
    assert tools.client.server_info.name == "cloto-mcp-cpersona"
    caps = tools.client.server_capabilities
    assert caps.tools is not None and caps.resources is None and caps.prompts is None


async def test_success_is_one_text_content_without_structured_content(tools):
    res = await tools.raw("store", {"agent_id": "a", "message": {"content": "x"}})
    assert res.is_error is False and len(res.content) == 1
    assert res.content[0].type == "text" and res.structured_content is None
    assert json.loads(res.content[0].text)["result"] == "stored"


@pytest.mark.parametrize("name", ["nope", "recall_everything", "メモ", ""])
async def test_unknown_tool_is_the_bare_error(tools, name):
    before = await tools.snapshot()
    res = await tools.raw(name, {"agent_id": "a"})
    assert res.is_error is False and len(res.content) == 1
    assert json.loads(res.content[0].text) == {"error": f"Unknown tool: {name}"}
    # The outer layer escapes non-ASCII (surface.md §1.3).
    assert res.content[0].text.isascii()
    assert await tools.snapshot() == before


async def test_exception_escaping_a_handler_is_the_bare_error(tools, monkeypatch):
    def boom(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("disk on fire — ü")

    monkeypatch.setattr(tools.engine.writer, "store", boom)
    res = await tools.raw("store", {"agent_id": "a", "message": {"content": "x"}})
    assert res.is_error is False
    out = json.loads(res.content[0].text)
    assert set(out) == {"error"} and "disk on fire — ü" in out["error"]
    assert res.content[0].text.isascii()
    monkeypatch.undo()
    # The server is still serving.
    assert (await tools("store", {"agent_id": "a", "message": {"content": "x"}}))["ok"] is True


SCHEMA_VIOLATIONS = [
    ("store", {}),
    ("store", {"agent_id": "a"}),
    ("store", {"message": {"content": "x"}}),
    ("store", {"agent_id": 5, "message": {"content": "x"}}),
    ("store", {"agent_id": None, "message": {"content": "x"}}),
    ("store", {"agent_id": "a", "message": "x"}),
    ("store", {"agent_id": "a", "message": ["x"]}),
    ("store", {"agent_id": "a", "message": {"content": 5}}),
    ("store", {"agent_id": "a", "message": {"content": ["x"]}}),
    ("store", {"agent_id": "a", "message": {"content": "x", "id": 7}}),
    ("store", {"agent_id": "a", "message": {"content": "x", "source": 5}}),
    ("store", {"agent_id": "a", "message": {"content": "x", "source": ["User"]}}),
    ("store", {"agent_id": "a", "message": {"content": "x", "metadata": []}}),
    ("store", {"agent_id": "a", "message": {"content": "x", "metadata": "m"}}),
    ("store", {"agent_id": "a", "message": {"content": "x", "timestamp": 1700000000}}),
    ("store", {"agent_id": "a", "message": {"content": "x"}, "channel": None}),
    ("store", {"agent_id": "a", "message": {"content": "x"}, "project_id": 1}),
    ("store", {"agent_id": "a", "message": {"content": "x"}, "session_key": False}),
    ("update_memory", {"memory_id": 1}),
    ("update_memory", {"content": "x"}),
    ("update_memory", {"memory_id": "1", "content": "x"}),
    ("update_memory", {"memory_id": 1.5, "content": "x"}),
    ("update_memory", {"memory_id": True, "content": "x"}),
    ("update_memory", {"memory_id": 1, "content": None}),
    ("update_memory", {"memory_id": 1, "content": "x", "agent_id": 3}),
    ("delete_memory", {}),
    ("delete_memory", {"memory_id": None}),
    ("delete_memory", {"memory_id": [1]}),
    ("lock_memory", {"memory_id": "1"}),
    ("unlock_memory", {"memory_id": {}}),
    ("delete_episode", {"episode_id": "1"}),
    ("delete_episode", {"memory_id": 1}),
    ("archive_episode", {"agent_id": "a"}),
    ("archive_episode", {"summary": "s"}),
    ("archive_episode", {"agent_id": "a", "summary": "s", "history": "h"}),
    ("archive_episode", {"agent_id": "a", "summary": "s", "history": ["h"]}),
    ("archive_episode", {"agent_id": "a", "summary": "s", "resolved": "yes"}),
    ("archive_episode", {"agent_id": "a", "summary": "s", "keywords": ["k"]}),
    ("get_profile", {}),
    ("get_profile", {"agent_id": 1}),
    ("update_profile", {"agent_id": "a"}),
    ("update_profile", {"agent_id": "a", "profile": {"text": "p"}}),
    ("list_memories", {"limit": "10"}),
    ("list_memories", {"limit": True}),
    ("list_memories", {"limit": 2.5}),
    ("list_memories", {"agent_id": None}),
    ("list_memories", {"project_id": None}),
    ("list_episodes", {"limit": "5"}),
    ("list_episodes", {"agent_id": 0}),
]


async def seed(tools: Any) -> dict[str, int]:
    """A small database: two agents, a locked row, an episode each, one profile."""
    ids = {}
    for agent in ("alice", "bob"):
        out = await tools(
            "store", {"agent_id": agent, "message": {"id": "m1", "content": f"{agent} note"}}
        )
        ids[agent] = out["id"]
        ep = await tools("archive_episode", {"agent_id": agent, "summary": f"{agent} ep"})
        ids[f"{agent}_ep"] = ep["episode_id"]
    locked = await tools("store", {"agent_id": "alice", "message": {"content": "locked"}})
    await tools("lock_memory", {"memory_id": locked["id"]})
    ids["locked"] = locked["id"]
    await tools("update_profile", {"agent_id": "alice", "profile": "alice profile"})
    return ids


@pytest.mark.parametrize(("tool", "args"), SCHEMA_VIOLATIONS)
async def test_schema_violations_change_nothing(tools, tool, args):
    await seed(tools)
    before = await tools.snapshot()
    res = await tools.raw(tool, args)
    assert res.is_error is True and len(res.content) == 1
    text = res.content[0].text
    assert text.startswith("Input validation error: "), text
    with pytest.raises(ValueError):
        json.loads(text)
    assert await tools.snapshot() == before


BIG = 2**70  # an integer SQLite cannot hold: no row can have it


async def test_refusals_change_nothing(tools):
    ids = await seed(tools)
    bob, bob_ep, locked = ids["bob"], ids["bob_ep"], ids["locked"]
    ambiguous = "not found, not owned by agent, or locked"
    not_owned = "not found or not owned by agent"
    # (tool, arguments, the error it answers with {"ok": false}); nothing may change.
    refusals: list[tuple[str, dict[str, Any], str]] = [
        # ids of another agent: the ambiguous error, the row untouched
        ("update_memory", {"memory_id": bob, "content": "x", "agent_id": "alice"},
         f"Memory {bob} {ambiguous}"),
        ("delete_memory", {"memory_id": bob, "agent_id": "alice"}, f"Memory {bob} {ambiguous}"),
        ("lock_memory", {"memory_id": bob, "agent_id": "alice"}, f"Memory {bob} {ambiguous}"),
        ("unlock_memory", {"memory_id": locked, "agent_id": "bob"}, f"Memory {locked} {ambiguous}"),
        ("delete_episode", {"episode_id": bob_ep, "agent_id": "alice"},
         f"Episode {bob_ep} {not_owned}"),
        # locked
        ("update_memory", {"memory_id": locked, "content": "x"},
         f"Memory {locked} is locked and cannot be edited"),
        ("delete_memory", {"memory_id": locked},
         f"Memory {locked} is locked and cannot be deleted"),
        # unknown ids, including ones no SQLite row can have
        ("update_memory", {"memory_id": 0, "content": "x"}, "Memory 0 not found"),
        ("update_memory", {"memory_id": -1, "content": "x"}, "Memory -1 not found"),
        ("update_memory", {"memory_id": BIG, "content": "x"}, f"Memory {BIG} not found"),
        ("update_memory", {"memory_id": BIG, "content": "x", "agent_id": "alice"},
         f"Memory {BIG} {ambiguous}"),
        ("delete_memory", {"memory_id": BIG}, f"Memory {BIG} not found"),
        ("delete_memory", {"memory_id": -BIG, "agent_id": "bob"}, f"Memory {-BIG} {ambiguous}"),
        ("lock_memory", {"memory_id": BIG}, f"Memory {BIG} not found"),
        ("unlock_memory", {"memory_id": BIG, "agent_id": "a"}, f"Memory {BIG} {ambiguous}"),
        ("delete_episode", {"episode_id": BIG}, f"Episode {BIG} {not_owned}"),
        ("delete_episode", {"episode_id": 0}, f"Episode 0 {not_owned}"),
    ]  # fmt: skip
    before = await tools.snapshot()
    for tool, args, error in refusals:
        assert await tools(tool, args) == {"ok": False, "error": error}, (tool, args)
    # the collision that 2.5.x leaked as a bare UNIQUE error
    duplicate = {"agent_id": "alice", "message": {"id": "m1", "content": "changed"}}
    assert await tools("store", duplicate) == {
        "ok": True, "result": "skipped", "reason": "duplicate msg_id", "id": ids["alice"]
    }  # fmt: skip
    collide = await tools("update_memory", {"memory_id": ids["alice"], "content": "locked"})
    assert set(collide) == {"ok", "error"} and collide["ok"] is False
    assert await tools.snapshot() == before


async def test_huge_list_limits_are_clamped(tools):
    await seed(tools)
    assert (await tools("list_memories", {"limit": BIG}))["count"] == 3
    assert (await tools("list_memories", {"limit": -BIG}))["count"] == 0
    assert (await tools("list_episodes", {"limit": BIG}))["count"] == 2


SURROGATE_CALLS: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    (
        "store",
        {"agent_id": "a\ud800", "message": {"content": "x"}},
        {"ok": False, "result": "rejected"},
    ),
    (
        "store",
        {"agent_id": "a", "message": {"content": "x\udfff y"}},
        {"ok": False, "result": "rejected"},
    ),
    (
        "store",
        {"agent_id": "a", "message": {"content": "x", "id": "\udc00"}},
        {"ok": False, "result": "rejected"},
    ),
    (
        "store",
        {"agent_id": "a", "message": {"content": "x"}, "channel": "\ud83d"},
        {"ok": False, "result": "rejected"},
    ),
    (
        "store",
        {"agent_id": "a", "message": {"content": "x", "source": {"id": "\ud800"}}},
        {"ok": False, "result": "rejected"},
    ),
    (
        "store",
        {"agent_id": "a", "message": {"content": "x", "metadata": {"k": ["\ud800"]}}},
        {"ok": False, "result": "rejected"},
    ),
    ("update_memory", {"memory_id": 1, "content": "new \ud800"}, {"ok": False}),
    ("update_memory", {"memory_id": 1, "content": "new", "agent_id": "\ud800"}, {"ok": False}),
    ("archive_episode", {"agent_id": "\ud800", "summary": "s"}, {"ok": False, "episode_id": None}),
    (
        "archive_episode",
        {"agent_id": "a", "summary": "s", "history": [{"timestamp": "\ud800"}]},
        {"ok": False, "episode_id": None},
    ),
    (
        "update_profile",
        {"agent_id": "alice", "profile": "p\ud800"},
        {"ok": False, "profiles_updated": 0},
    ),
    ("get_profile", {"agent_id": "\ud800"}, {"ok": False}),
    ("list_memories", {"agent_id": "\ud800"}, {"ok": False, "memories": [], "count": 0}),
    ("list_episodes", {"project_id": "\ud800"}, {"ok": False, "episodes": [], "count": 0}),
    ("delete_memory", {"memory_id": 1, "agent_id": "\udfff"}, {"ok": False}),
    ("lock_memory", {"memory_id": 1, "agent_id": "\udfff"}, {"ok": False}),
]


@pytest.mark.parametrize(("tool", "args", "expected"), SURROGATE_CALLS)
async def test_lone_surrogates_are_refused_with_the_tools_shape(tools, tool, args, expected):
    await seed(tools)
    before = await tools.snapshot()
    out = await tools(tool, args)
    explanation = "reason" if tool == "store" else "error"
    assert "surrogate" in out[explanation]
    assert {k: out[k] for k in expected} == expected
    extra = set(out) - set(expected) - {"error", "reason"}
    assert not extra, out
    assert await tools.snapshot() == before


async def test_unicode_that_is_valid_is_accepted_everywhere(tools):
    out = await tools("store", {"agent_id": "エージェント😀", "message": {"content": "𝔘𝔫𝔦"}})
    assert out["result"] == "stored"
    listed = await tools("list_memories", {"agent_id": "エージェント😀"})
    assert listed["memories"][0]["content"] == "𝔘𝔫𝔦"


async def test_server_survives_a_burst_of_bad_calls(tools):
    await seed(tools)
    before = await tools.snapshot()
    for tool, args in SCHEMA_VIOLATIONS:
        await tools.raw(tool, args)
    for tool, args, _ in SURROGATE_CALLS:
        await tools.raw(tool, args)
    await tools.raw("nope", {})
    assert await tools.snapshot() == before
    out = await tools("store", {"agent_id": "alice", "message": {"content": "still alive"}})
    assert out["result"] == "stored"
