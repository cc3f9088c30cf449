"""ACL mode through a real server (surface.md §11.4): each kind of grant (none, read,
read-write, `*`, a named agent, no grants at all) against each class of tool (a per-agent read,
a per-agent write, an agent-wide sweep), on both protocol eras; a client reading another agent's
rows is denied and sees none of them; `CPERSONA_AUTH_TOKEN` is ignored with a warning; a broken
file refuses start-up; stdio runs as the principal `local`.
"""

from __future__ import annotations

import json
import sys
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from child_env import inherited
from cpersona.storage import open_database
from mcp import Client, StdioServerParameters
from pg_support import drop_database, fresh_database
from support.http_server import WAIT, HttpServer, connect, initialize_body, interleaved, post
from support.mcp_client import Tools

ADMIN = "admin-token-from-env"
CLIENTS = {
    # client id: (token, grants)
    "admin": ("${CPT_ACL_ADMIN}", {"*": "read-write"}),
    "alpha-reader": ("tok-alpha-reader", {"alpha": "read"}),
    "alpha-writer": ("tok-alpha-writer", {"alpha": "read-write"}),
    "star-reader": ("tok-star-reader", {"*": "read"}),
    "all-but-alpha": ("tok-all-but-alpha", {"*": "read-write", "alpha": "none"}),
    "nobody": ("tok-nobody", {}),
}
TOKENS = {cid: (ADMIN if cid == "admin" else tok) for cid, (tok, _) in CLIENTS.items()}


def acl_file(path: Path, extra: list[dict[str, Any]] | None = None) -> Path:
    rows = [{"client_id": c, "token": t, "grants": g} for c, (t, g) in CLIENTS.items()]
    path.write_text(json.dumps({"clients": rows + (extra or [])}), encoding="utf-8")
    path.chmod(0o600)
    return path


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def server(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest):
    """One ACL server per backend (issue 12: the same checks on SQLite and PostgreSQL)."""
    work = tmp_path_factory.mktemp("acl")
    url = fresh_database() if request.param == "postgresql" else None
    srv = HttpServer(work, {
        "CPERSONA_ACL_FILE": str(acl_file(work / "acl.json")),
        "CPT_ACL_ADMIN": ADMIN,
        "CPERSONA_AUTH_TOKEN": "legacy-token-ignored",
        **({"CPERSONA_DATABASE_URL": url} if url else {}),
    })  # fmt: skip
    srv.start()
    yield srv
    assert srv.stop() == 0, srv.stderr
    if url:
        drop_database(url)


def store_args(agent: str, content: str) -> dict[str, Any]:
    return {"agent_id": agent, "message": {"content": content}}


@pytest.fixture(scope="module")
def seeded(server):
    """alpha and beta each hold a secret memory and a profile (written by admin)."""
    import anyio

    async def seed() -> dict[str, int]:
        ids = {}
        async with connect(server.url, ADMIN) as tools:
            for agent in ("alpha", "beta"):
                stored = await tools("store", store_args(agent, f"{agent} secret: the vault code"))
                assert stored["result"] == "stored", stored
                ids[agent] = stored["id"]
                profile = await tools(
                    "update_profile", {"agent_id": agent, "profile": f"{agent} private profile"}
                )
                assert profile["ok"] is True
        return ids

    return anyio.run(seed)


def calls(run: str) -> dict[str, tuple[str, dict[str, Any]]]:
    """One call per (tool class, scope); writes carry `run` so repeated runs never dedup."""
    return {
        "read alpha": ("list_memories", {"agent_id": "alpha"}),
        "read beta": ("recall", {"agent_id": "beta", "query": "vault code"}),
        "read gamma": ("get_profile", {"agent_id": "gamma"}),  # granted to nobody by name
        "write alpha": ("store", store_args("alpha", f"note {run}")),
        "write beta": ("update_profile", {"agent_id": "beta", "profile": f"beta profile {run}"}),
        "sweep read": ("list_memories", {"agent_id": ""}),
        "sweep write": ("delete_memory", {"memory_id": 10**9}),  # unscoped: any agent's row
    }


#: What a denial of each call names: the agent pattern and the permission it lacked.
DENIED_AS = {
    "read alpha": ("alpha", "read"), "read beta": ("beta", "read"),
    "read gamma": ("gamma", "read"), "write alpha": ("alpha", "read-write"),
    "write beta": ("beta", "read-write"), "sweep read": ("*", "read"),
    "sweep write": ("*", "read-write"),
}  # fmt: skip
#: Which calls each client may make (the rest must be denied).
ALLOWED = {
    "admin": set(DENIED_AS),
    "alpha-reader": {"read alpha"},
    "alpha-writer": {"read alpha", "write alpha"},
    "star-reader": {"read alpha", "read beta", "read gamma", "sweep read"},
    "all-but-alpha": {"read beta", "read gamma", "write beta"},
    "nobody": set(),
}
#: Tools any authenticated principal may call, once they are registered.
ANY_PRINCIPAL = {"persistence_status": {}, "get_queue_status": {}, "get_operating_context": {}}


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["auto", "legacy"])
@pytest.mark.parametrize("client_id", list(CLIENTS))
async def test_http_acl_grant_matrix(server, seeded, client_id, mode):
    run = f"{client_id}-{mode}"
    async with connect(server.url, TOKENS[client_id], mode=mode) as tools:
        for label, (tool, args) in calls(run).items():
            answer = await tools(tool, args)
            if label in ALLOWED[client_id]:
                assert answer.get("error") != "permission_denied", (label, answer)
                continue
            agent, required = DENIED_AS[label]
            assert answer == {
                "ok": False, "error": "permission_denied", "tool": tool, "agent_id": agent,
                "required": required, "client_id": client_id, "detail": answer.get("detail"),
            }, (label, answer)  # fmt: skip
            assert isinstance(answer["detail"], str) and answer["detail"]
        listed = {tool.name for tool in (await tools.client.list_tools()).tools}
        for tool, args in ANY_PRINCIPAL.items():
            if tool in listed:
                answer = await tools(tool, args)
                assert answer.get("error") != "permission_denied", (tool, answer)
    wrote_alpha = ("alpha", f"note {run}") in db_rows(server)
    assert wrote_alpha == ("write alpha" in ALLOWED[client_id])


def db_rows(server: HttpServer) -> list[tuple[str, str]]:
    """The server's stored memories, read beside it (either backend)."""
    url = server.env.get("CPERSONA_DATABASE_URL")
    with closing(open_database(str(server.db), database_url=url, pool_size=1)) as db:
        return [(r[0], r[1]) for r in db.query("SELECT agent_id, content FROM memories")]


@pytest.mark.anyio
async def test_http_acl_reading_another_agent_is_denied_without_data(server, seeded):
    beta_id = seeded["beta"]
    attempts = [
        ("recall", {"agent_id": "beta", "query": "vault code"}),
        ("recall_with_context", {"agent_id": "beta", "query": "vault code"}),
        ("list_memories", {"agent_id": "beta"}),
        ("list_memories", {"agent_id": ""}),
        ("list_memories", {}),
        ("get_profile", {"agent_id": "beta"}),
        ("get_contents", {"agent_id": "beta", "refs": [f"mem:{beta_id}"]}),
        ("list_episodes", {"agent_id": "beta"}),
        ("get_recall_precision", {"agent_id": "beta"}),
        ("update_memory", {"memory_id": beta_id, "content": "overwritten"}),
        ("delete_memory", {"memory_id": beta_id, "agent_id": "beta"}),
        ("lock_memory", {"memory_id": beta_id}),
    ]
    async with connect(server.url, TOKENS["alpha-reader"]) as tools:
        for tool, args in attempts:
            result = await tools.raw(tool, args)
            text = result.content[0].text
            assert "beta secret" not in text and "private profile" not in text, (tool, text)
            payload = json.loads(text)
            assert set(payload) == {
                "ok",
                "error",
                "tool",
                "agent_id",
                "required",
                "client_id",
                "detail",
            }, payload
            assert payload["error"] == "permission_denied"
        # its own agent still answers, with data
        own = await tools("recall", {"agent_id": "alpha", "query": "vault code"})
        assert any("alpha secret" in m["content"] for m in own["messages"])
    assert ("beta", "beta secret: the vault code") in db_rows(server)  # untouched


def test_http_acl_ignores_the_legacy_token_with_a_warning(server):
    assert "CPERSONA_AUTH_TOKEN is ignored in ACL mode" in server.stderr
    assert "auth: ACL file" in server.stderr and "legacy-token-ignored" not in server.stderr
    refused = post(server.url, initialize_body(), {"Authorization": "Bearer legacy-token-ignored"})
    assert refused.status_code == 401
    ok = post(server.url, initialize_body(), {"Authorization": f"Bearer {TOKENS['nobody']}"})
    assert ok.status_code == 200  # authenticated, even with no grants


def test_http_acl_broken_file_refuses_start_with_one_line(tmp_path):
    bad = tmp_path / "acl.json"
    bad.write_text(json.dumps({"clients": [
        {"client_id": "x", "token": "${CPT_ACL_UNSET_VARIABLE}", "grants": {}}
    ]}), encoding="utf-8")  # fmt: skip
    srv = HttpServer(tmp_path, {"CPERSONA_ACL_FILE": str(bad)})
    srv.launch()
    assert srv.wait_exit() == 2
    lines = srv.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"cpersona: CPERSONA_ACL_FILE={bad}: "), lines
    assert "CPT_ACL_UNSET_VARIABLE" in lines[0]
    assert not srv.db.exists()


@pytest.mark.anyio
async def test_http_acl_stdio_runs_as_local(tmp_path):
    path = acl_file(tmp_path / "acl.json", [
        {"client_id": "local", "token": None, "grants": {"alpha": "read-write"}}
    ])  # fmt: skip
    env = inherited()
    env.update(
        {
            "CPERSONA_DB_PATH": str(tmp_path / "stdio.db"),
            "CPERSONA_EMBEDDING_MODE": "hashing",
            "CPERSONA_ACL_FILE": str(path),
            "CPT_ACL_ADMIN": ADMIN,
        }
    )
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "cpersona"], env=env, cwd=str(tmp_path)
    )
    async with Client(params, read_timeout_seconds=WAIT) as mcp:
        allowed = await mcp.call_tool("store", store_args("alpha", "ok"))
        assert json.loads(allowed.content[0].text)["result"] == "stored"
        denied = json.loads(
            (await mcp.call_tool("store", store_args("beta", "no"))).content[0].text
        )
        assert denied["error"] == "permission_denied" and denied["client_id"] == "local"


@pytest.mark.anyio
async def test_http_acl_concurrent_clients_never_share_an_identity(server, seeded):
    """Interleaved calls of two clients with opposite grants: each answer is its caller's."""

    async def one_call(tools: Tools, client_id: str, step: int) -> str | None:
        mine, theirs = ("alpha", "beta") if client_id == "alpha-writer" else ("beta", "alpha")
        agent = mine if step % 2 == 0 else theirs
        answer = await tools("get_profile", {"agent_id": agent})
        denied = answer.get("error") == "permission_denied"
        if denied != (agent == theirs) or (denied and answer["client_id"] != client_id):
            return f"on {agent}: {answer}"
        return None

    callers = {name: TOKENS[name] for name in ("alpha-writer", "all-but-alpha")}
    assert await interleaved(server.url, callers, one_call, tasks=4, steps=12) == []
