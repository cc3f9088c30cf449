"""ACL mode without a network (surface.md §11.4): the file's validation rules, the grant
lattice, every tool's demand, and where the guard sits in the dispatch order (§1.5), through an
in-memory MCP client."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from cpersona.errors import ConfigError
from cpersona.server.acl import (
    CLASSIFIED,
    STAR,
    AclClient,
    AclConfig,
    Guard,
    demands,
    load_acl,
)
from cpersona.server.app import build_server
from cpersona.server.tools import REGISTRATION_ORDER
from mcp import Client


def write(tmp_path: Path, doc: Any) -> str:
    path = tmp_path / "acl.json"
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc), encoding="utf-8")
    path.chmod(0o600)
    return str(path)


def client(client_id: str = "a", **row: Any) -> dict[str, Any]:
    return {"client_id": client_id, "token": f"tok-{client_id}", "grants": {}, **row}


# --------------------------------------------------------------------------- the file


def test_acl_load_resolves_env_references_and_keeps_literals(tmp_path):
    path = write(tmp_path, {"clients": [
        client("env", token="${ACL_TEST_TOKEN}", grants={"alpha": "read-write", "*": "read"}),
        client("lit", token="literal-token"),
        {"client_id": "local", "token": None, "grants": {"*": "read-write"}},
        {"client_id": "oauth:x", "token": None, "grants": {}, "per_subject": True},
    ]})  # fmt: skip
    config = load_acl(path, {"ACL_TEST_TOKEN": "from-env"})
    assert [(c.client_id, c.token) for c in config.clients] == [
        ("env", "from-env"),
        ("lit", "literal-token"),
        ("local", None),
        ("oauth:x", None),
    ]
    assert config.identify(b"from-env") == "env"
    assert config.identify(b"literal-token") == "lit"
    assert config.identify(b"from-en") is None and config.identify(b"") is None


@pytest.mark.parametrize(
    ("doc", "fragment"),
    [
        ("{not json", "Expecting property name"),
        ([], 'exactly {"clients"'),
        ({"clients": []}, "non-empty list"),
        ({"clients": [client()], "extra": 1}, 'exactly {"clients"'),
        ({"clients": [client(grant={})]}, "unknown key(s) 'grant'"),
        ({"clients": [client(client_id="")]}, "client_id must be a non-empty string"),
        ({"clients": [client("a"), client("a", token="other")]}, "listed twice"),
        ({"clients": [client("a"), client("b", token="tok-a")]}, "every token must be unique"),
        ({"clients": [client(grants={"alpha": "write"})]}, "expected none, read or read-write"),
        ({"clients": [client(grants={"": "read"})]}, "empty agent id"),
        ({"clients": [client(grants=["alpha"])]}, "grants must be an object"),
        ({"clients": [{"client_id": "a", "grants": {}}]}, "token is required"),
        ({"clients": [client(token="")]}, "non-empty string or null"),
        ({"clients": [client(token=5)]}, "non-empty string or null"),
        ({"clients": [client(token="${UNSET_ACL_VAR}")]}, "unset or empty"),
        ({"clients": [client(token="pre-${ACL_TEST_TOKEN}")]}, "exactly one whole ${VAR}"),
        ({"clients": [client(token="t\u00f6ken")]}, "token must be ASCII"),
        ({"clients": [{"client_id": "local", "token": "x", "grants": {}}]}, "takes no token"),
        ({"clients": [client(per_subject=True)]}, "per_subject is allowed only"),
        ({"clients": [client(per_subject="yes")]}, "per_subject must be true or false"),
        (
            '{"clients": [{"client_id": "a", "client_id": "b", "token": "t", "grants": {}}]}',
            "appears twice",
        ),
    ],
)
def test_acl_load_refuses_each_defect_with_one_line(tmp_path, doc, fragment):
    path = write(tmp_path, doc)
    with pytest.raises(ConfigError) as err:
        load_acl(path, {"ACL_TEST_TOKEN": "x"})
    message = str(err.value)
    assert "\n" not in message and message.startswith(f"CPERSONA_ACL_FILE={path}: ")
    assert fragment in message


def test_acl_load_refuses_a_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="cannot read it"):
        load_acl(str(tmp_path / "absent.json"), {})


def test_acl_load_warns_about_a_readable_file(tmp_path, caplog):
    path = write(tmp_path, {"clients": [client()]})
    os.chmod(path, 0o644)
    load_acl(path, {})
    assert "readable by group or others" in caplog.text


# --------------------------------------------------------------------------- the lattice


def test_acl_grant_exact_beats_star_even_when_lower():
    c = AclClient("c", "t", {"alpha": "none", "beta": "read", STAR: "read-write"})
    assert (c.level("alpha"), c.level("beta"), c.level("gamma")) == (0, 1, 2)
    assert c.level(STAR) == 0  # a sweep also reaches alpha, where it holds nothing


def test_acl_grant_sweep_needs_a_star_grant():
    assert AclClient("c", "t", {"alpha": "read-write"}).level(STAR) == 0
    assert AclClient("c", "t", {STAR: "read"}).level(STAR) == 1
    assert AclClient("c", "t", {STAR: "read-write", "beta": "read"}).level(STAR) == 1
    assert AclClient("c", "t", {}).level("alpha") == 0


# --------------------------------------------------------------------------- demands


def test_acl_every_tool_of_the_surface_is_classified():
    assert set(REGISTRATION_ORDER) == CLASSIFIED and len(CLASSIFIED) == 34
    for tool in REGISTRATION_ORDER:
        assert demands(tool, {"agent_id": "a"}, export_dir_set=False) is not None, tool
    assert demands("no_such_tool", {}, export_dir_set=False) is None


def need(tool: str, args: dict[str, Any], export_dir_set: bool = False) -> list[tuple[str, str]]:
    found = demands(tool, args, export_dir_set=export_dir_set)
    assert found is not None
    return [(d.agent, d.required) for d in found]


@pytest.mark.parametrize(
    ("tool", "args", "expected"),
    [
        ("persistence_status", {}, []),
        ("get_queue_status", {}, []),
        ("get_operating_context", {"section": "x"}, []),
        ("pause_persistence", {"agent_id": "a"}, [("*", "read-write")]),
        ("resume_persistence", {}, [("*", "read-write")]),
        ("recall", {"agent_id": "a", "query": "q"}, [("a", "read")]),
        ("recall", {"query": "q"}, [("*", "read")]),
        ("recall", {"agent_id": "", "query": "q"}, [("*", "read")]),
        ("recall", {"agent_id": "*", "query": "q"}, [("*", "read")]),
        ("get_profile", {"agent_id": "a"}, [("a", "read")]),
        ("list_memories", {"agent_id": ""}, [("*", "read")]),
        ("list_episodes", {"agent_id": "b"}, [("b", "read")]),
        ("store", {"agent_id": "a", "message": {}}, [("a", "read-write")]),
        ("store", {"message": {}}, [("*", "read-write")]),
        ("delete_memory", {"memory_id": 1}, [("*", "read-write")]),
        ("delete_memory", {"memory_id": 1, "agent_id": "a"}, [("a", "read-write")]),
        ("calibrate_threshold", {"agent_id": ""}, [("*", "read-write")]),
        ("migrate_channel_axis", {}, [("*", "read-write")]),
        ("export_memories", {"agent_id": "a", "output_path": "x"}, [("*", "read-write")]),
        ("import_memories", {"target_agent_id": "a"}, [("*", "read-write")]),
        (
            "merge_memories",
            {"source_agent_id": "s", "target_agent_id": "t"},
            [("s", "read"), ("t", "read-write")],
        ),
        (
            "merge_memories",
            {"source_agent_id": "s", "target_agent_id": "t", "mode": "copy"},
            [("s", "read"), ("t", "read-write")],
        ),
        (
            "merge_memories",
            {"source_agent_id": "s", "target_agent_id": "t", "mode": "move"},
            [("s", "read-write"), ("t", "read-write")],
        ),
        (
            "merge_memories",
            {"source_agent_id": "s", "mode": "MOVE"},
            [("s", "read-write"), ("*", "read-write")],
        ),
        ("check_health", {"agent_id": "a"}, [("a", "read")]),
        (
            "check_health",
            {"agent_id": "a", "fix": True},
            [("a", "read-write"), ("*", "read-write")],
        ),
        (
            "check_health",
            {"agent_id": "a", "fix": True, "checks": ["dedup_msg_id_index"]},
            [("a", "read-write"), ("*", "read-write")],
        ),
        (
            "check_health",
            {"agent_id": "a", "fix": True, "checks": ["fts_sync"]},
            [("a", "read-write")],
        ),
        ("check_health", {"agent_id": "a", "fix": "true"}, [("a", "read")]),
        ("deep_check", {"agent_id": "a"}, [("a", "read")]),
        ("deep_check", {"agent_id": "a", "fix": True}, [("a", "read-write")]),
        ("get_session_findings", {"agent_id": "a"}, [("*", "read")]),
        ("check_update", {}, [("*", "read")]),
        ("check_update", {"apply": True}, [("*", "read-write")]),
    ],
)
def test_acl_demand_of_each_tool(tool, args, expected):
    assert need(tool, args) == expected


def test_acl_demand_of_file_tools_narrows_with_an_export_dir():
    assert need("export_memories", {"agent_id": "a"}, True) == [("a", "read-write")]
    assert need("export_memories", {"agent_id": ""}, True) == [("*", "read-write")]
    assert need("import_memories", {"target_agent_id": "b"}, True) == [("b", "read-write")]
    assert need("import_memories", {}, True) == [("*", "read-write")]


# --------------------------------------------------------------------------- the guard


CONFIG = AclConfig("acl.json", (
    AclClient("reader", "t1", {"alpha": "read"}),
    AclClient("writer", "t2", {"alpha": "read-write", STAR: "read"}),
))  # fmt: skip


def test_acl_guard_denial_shape_and_details():
    guard = Guard(CONFIG, lambda: "reader", export_dir_set=False)
    assert guard("recall", {"agent_id": "alpha", "query": "q"}) is None
    assert guard("store", {"agent_id": "alpha"}) == {
        "ok": False, "error": "permission_denied", "tool": "store", "agent_id": "alpha",
        "required": "read-write", "client_id": "reader",
        "detail": "client 'reader' holds read on 'alpha'; store needs read-write",
    }  # fmt: skip
    omitted = guard("list_memories", {})
    assert omitted is not None and omitted["agent_id"] == "*"
    assert "send agent_id" in omitted["detail"]
    star = guard("recall", {"agent_id": "*"})
    assert star is not None and "'*' addresses every agent" in star["detail"]
    sweep = guard("pause_persistence", {})
    assert sweep is not None and sweep["detail"] == "pause_persistence acts on every agent"
    assert guard("persistence_status", {}) is None  # any authenticated principal


def test_acl_guard_denies_unlisted_unclassified_and_anonymous():
    unlisted = Guard(CONFIG, lambda: "oauth:someone", export_dir_set=False)
    denial = unlisted("get_profile", {"agent_id": "alpha"})
    assert denial is not None and "no entry in the ACL file" in denial["detail"]
    assert unlisted("get_queue_status", {}) is None
    guard = Guard(CONFIG, lambda: "writer", export_dir_set=False)
    assert guard("brand_new_tool", {}) == {
        "ok": False, "error": "permission_denied", "tool": "brand_new_tool",
        "client_id": "writer", "detail": "tool not classified for ACL enforcement",
    }  # fmt: skip
    anonymous = Guard(CONFIG, lambda: None, export_dir_set=False)
    denial = anonymous("persistence_status", {})
    assert denial is not None and denial["client_id"] is None


def test_acl_guard_merge_copy_needs_read_on_source_only():
    guard = Guard(CONFIG, lambda: "writer", export_dir_set=False)
    copy = {"source_agent_id": "beta", "target_agent_id": "alpha"}
    assert guard("merge_memories", copy) is None
    moved = guard("merge_memories", {**copy, "mode": "move"})
    assert moved is not None and (moved["agent_id"], moved["required"]) == ("beta", "read-write")


# --------------------------------------------------------------------------- dispatch order


@pytest.mark.anyio
@pytest.mark.runs_on(store_backend="sqlite")  # the order of dispatch, not the database
async def test_acl_guard_sits_between_schema_and_everything_else(make_engine):
    engine = make_engine()
    guard = Guard(CONFIG, lambda: "reader", export_dir_set=False)
    async with Client(build_server(engine, authorize=guard), raise_exceptions=True) as mcp:
        # the schema layer answers first
        invalid = await mcp.call_tool("store", {"agent_id": "beta", "message": "not an object"})
        assert invalid.is_error and invalid.content[0].text.startswith("Input validation error")
        # an unknown tool is answered by the dispatch before the guard
        unknown = json.loads((await mcp.call_tool("nope", {})).content[0].text)
        assert unknown == {"error": "Unknown tool: nope"}
        # the guard beats the lone-surrogate refusal and any handler validation
        denied = await mcp.call_tool(
            "store", {"agent_id": "beta", "message": {"content": "half \ud83d an emoji"}}
        )
        payload = json.loads(denied.content[0].text)
        assert payload["error"] == "permission_denied" and payload["agent_id"] == "beta"
        # a denial that must echo a lone surrogate is still valid UTF-8 on the wire
        odd = await mcp.call_tool("get_profile", {"agent_id": "b\udc80d"})
        assert "\\udc80" in odd.content[0].text
        assert json.loads(odd.content[0].text)["error"] == "permission_denied"
        # nothing was written by any of them
        assert engine.db.query("SELECT count(*) FROM memories")[0][0] == 0
