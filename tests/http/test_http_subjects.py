"""Per-subject partitioning through a real server process (surface.md §11.5).

Two end users (subjects) of one OAuth client each get an opaque alias on first use; `@me` names
it; neither can reach the other's memories, episodes or profile through any tool, by `@me`, by
the other's alias or by row id; the ledger survives a restart; other principals cannot use
`@me` or unissued aliases; start-up refuses an unparseable ledger and a database that already
holds `@me` or an alias the ledger did not issue.
"""

from __future__ import annotations

import json
import re
import sqlite3
import stat
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from child_env import inherited
from oauth_support import RESOURCE, TestIssuer
from support.http_server import HttpServer, connect, interleaved, post
from support.mcp_client import Tools

ADMIN = "tok-admin"
ALIAS = re.compile(r"u-[0-9a-f]{12}")
#: One alias given to two subjects (of two issuers).
DUPLICATE = {"i": {"a": "u-0123456789ab"}, "j": {"b": "u-0123456789ab"}}
SECRET = "s1 secret: the locker code is 7319"


@pytest.fixture(scope="module")
def issuer():
    issuer = TestIssuer(algs=("ES256",))
    yield issuer
    issuer.close()


def acl_rows(issuer: TestIssuer) -> list[dict[str, Any]]:
    return [
        {"client_id": "admin", "token": ADMIN, "grants": {"*": "read-write"}},
        {"client_id": f"oauth:{issuer.url}:chat", "token": None, "grants": {"*": "read-write"},
         "per_subject": True},
        {"client_id": f"oauth:{issuer.url}:plain", "token": None, "grants": {"*": "read-write"}},
    ]  # fmt: skip


def make_server(work: Path, issuer: TestIssuer, name: str = "server") -> HttpServer:
    acl = work / "acl.json"
    acl.write_text(json.dumps({"clients": acl_rows(issuer)}), encoding="utf-8")
    acl.chmod(0o600)
    return HttpServer(
        work,
        {
            "CPERSONA_ACL_FILE": str(acl),
            "CPERSONA_OAUTH_RESOURCE": RESOURCE,
            "CPERSONA_OAUTH_AUTHORIZATION_SERVERS": issuer.url,
            "CPERSONA_EXPORT_DIR": str(work / "exports"),
        },
        name=name,
    )


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("subjects")


@pytest.fixture(scope="module")
def server(work, issuer):
    srv = make_server(work, issuer)
    srv.start()
    yield srv
    srv.stop()


def user(issuer: TestIssuer, sub: str, client: str = "chat") -> str:
    return issuer.token(sub=sub, client_id=client)


@pytest.fixture(scope="module")
def s1(server, issuer):
    """Subject s1 writes a memory, an episode and a profile under `@me`."""
    import anyio

    async def seed() -> dict[str, Any]:
        async with connect(server.url, user(issuer, "s1")) as tools:
            first = await tools("store", {"agent_id": "@me", "message": {"content": SECRET}})
            second = await tools("update_profile", {"agent_id": "@me", "profile": f"{SECRET} p"})
            episode = await tools("archive_episode", {"agent_id": "@me", "summary": SECRET})
        return {"first": first, "second": second, "episode": episode}

    seeded = anyio.run(seed)
    seeded["alias"] = seeded["first"]["resolved_agent_id"]
    return seeded


def rows(db: Path) -> list[tuple[str, str]]:
    with closing(sqlite3.connect(db)) as conn:
        return conn.execute("SELECT agent_id, content FROM memories ORDER BY id").fetchall()


def test_http_subjects_me_resolves_to_an_alias_issued_once(server, s1, work, issuer):
    first, second = s1["first"], s1["second"]
    assert first["result"] == "stored" and ALIAS.fullmatch(first["resolved_agent_id"])
    assert first["alias_issued"] is True
    assert second["resolved_agent_id"] == s1["alias"] and "alias_issued" not in second
    assert (s1["alias"], SECRET) in rows(server.db)
    ledger = work / "alias_ledger.json"
    assert json.loads(ledger.read_text()) == {
        "version": 1,
        "aliases": {issuer.url: {"s1": s1["alias"]}},
    }
    assert stat.S_IMODE(ledger.stat().st_mode) == 0o600
    assert sorted(p.name for p in work.iterdir() if p.name.startswith("alias_ledger")) == [
        "alias_ledger.json"
    ]  # no temp file left behind
    assert "no request can act as it" not in server.stderr  # the OAuth rows are reachable


def every_tool_call(other: str, memory_id: int, episode_id: int) -> list[tuple[str, dict]]:
    """Each tool, aimed at the caller's own agent, at `other`'s, and at `other`'s row ids."""
    calls: list[tuple[str, dict]] = []
    for agent in ("@me", other, "", "*"):
        calls += [
            ("recall", {"agent_id": agent, "query": "locker code"}),
            ("recall_with_context", {"agent_id": agent, "query": "locker code"}),
            ("get_contents", {"agent_id": agent, "refs": [f"mem:{memory_id}", f"ep:{episode_id}"]}),
            ("get_profile", {"agent_id": agent}),
            ("list_memories", {"agent_id": agent}),
            ("list_episodes", {"agent_id": agent}),
            ("get_recall_precision", {"agent_id": agent}),
            ("store", {"agent_id": agent, "message": {"content": f"s2 wrote to {agent!r}"}}),
            ("update_profile", {"agent_id": agent, "profile": f"s2 profile for {agent!r}"}),
            ("archive_episode", {"agent_id": agent, "summary": f"s2 episode for {agent!r}"}),
            ("set_recall_precision", {"agent_id": agent, "precision": "strict"}),
            ("update_memory", {"memory_id": memory_id, "content": "hijacked", "agent_id": agent}),
            ("lock_memory", {"memory_id": memory_id, "agent_id": agent}),
            ("unlock_memory", {"memory_id": memory_id, "agent_id": agent}),
            ("check_health", {"agent_id": agent}),
            ("deep_check", {"agent_id": agent}),
            ("export_memories", {"agent_id": agent, "output_path": "out.jsonl"}),
            ("calibrate_threshold", {"agent_id": agent}),
            ("migrate_channel_axis", {"agent_id": agent, "dry_run": True}),
            ("merge_memories", {"source_agent_id": agent, "target_agent_id": "@me",
                                "dry_run": True}),
            ("import_memories", {"input_path": "out.jsonl", "target_agent_id": agent,
                                 "dry_run": True}),
            ("traverse", {"agent_id": agent, "entity": "locker"}),
            ("reconstruct", {"agent_id": agent, "query": "locker code"}),
            ("declare_associations", {"agent_id": agent, "anchor_ref": f"mem:{memory_id}",
                                      "associations": {"entities": [{"name": "locker"}]}}),
        ]  # fmt: skip
    calls += [
        ("list_memories", {}),
        ("get_session_findings", {}),
        ("check_update", {}),
        ("persistence_status", {}),
        ("get_queue_status", {}),
        ("get_operating_context", {}),
        ("pause_persistence", {"ttl_seconds": 1}),
        ("resume_persistence", {}),
    ]
    # destructive calls last, so every read above still had something to leak
    for agent in (other, "", "@me"):
        calls += [
            ("delete_memory", {"memory_id": memory_id, "agent_id": agent}),
            ("delete_episode", {"episode_id": episode_id, "agent_id": agent}),
        ]
    calls += [
        ("delete_memory", {"memory_id": memory_id}),
        ("merge_memories", {"source_agent_id": other, "target_agent_id": "@me", "mode": "move"}),
        ("delete_agent_data", {"agent_id": other}),
    ]
    return calls


@pytest.mark.anyio
async def test_http_subjects_never_see_each_other_through_any_tool(server, s1, issuer):
    alias1 = s1["alias"]
    memory_id, episode_id = s1["first"]["id"], s1["episode"]["episode_id"]
    async with connect(server.url, user(issuer, "s2")) as tools:
        mine = await tools("store", {"agent_id": "@me", "message": {"content": "s2 own note"}})
        alias2 = mine["resolved_agent_id"]
        assert ALIAS.fullmatch(alias2) and alias2 != alias1 and mine["alias_issued"] is True
        listed = {t.name for t in (await tools.client.list_tools()).tools}
        called = set()
        for tool, args in every_tool_call(alias1, memory_id, episode_id):
            text = (await tools.raw(tool, args)).content[0].text
            called.add(tool)
            assert "locker code is 7319" not in text, (tool, args, text)
            answer = json.loads(text)
            if args.get("agent_id") == alias1 or args.get("source_agent_id") == alias1:
                assert answer["error"] == "permission_denied", (tool, args, answer)
        assert called == listed  # every registered tool was tried
        own = await tools("recall", {"agent_id": "@me", "query": "own note"})
        assert [m["content"] for m in own["messages"]] == ["s2 own note"]
    # s1's rows are untouched, and s2's are under its own alias only
    assert (alias1, SECRET) in rows(server.db)
    assert (alias2, "s2 own note") in rows(server.db)
    assert [content for agent, content in rows(server.db) if agent == alias1] == [SECRET]
    async with connect(server.url, user(issuer, "s1")) as tools:
        again = await tools("recall", {"agent_id": "@me", "query": "locker code"})
        assert SECRET in [m["content"] for m in again["messages"]]
        assert again["resolved_agent_id"] == alias1 and "alias_issued" not in again


@pytest.mark.anyio
async def test_http_subjects_me_and_unissued_aliases_are_reserved(server, s1, issuer):
    for token in (ADMIN, user(issuer, "s9", client="plain")):
        async with connect(server.url, token) as tools:
            for agent in ("@me", "u-0123456789ab"):
                answer = await tools("store", {"agent_id": agent, "message": {"content": "x"}})
                assert answer["error"] == "permission_denied" and answer["agent_id"] == agent
            # an issued alias is an ordinary agent to a principal granted `*`
            granted = await tools("list_memories", {"agent_id": s1["alias"]})
            assert any(m["content"] == SECRET for m in granted["memories"])
    agents = {agent for agent, _ in rows(server.db)}
    assert "@me" not in agents and "u-0123456789ab" not in agents


@pytest.mark.anyio
async def test_http_subjects_concurrent_subjects_never_share_an_alias(server, issuer):
    """Interleaved calls of two subjects of one client: each answer is its own caller's."""

    aliases = {}
    for sub in ("c1", "c2"):
        async with connect(server.url, user(issuer, sub)) as tools:
            note = {"content": f"{sub} private note about kites"}
            stored = await tools("store", {"agent_id": "@me", "message": note})
            aliases[sub] = stored["resolved_agent_id"]

    async def one_call(tools: Tools, sub: str, step: int) -> str | None:
        got = await tools("recall", {"agent_id": "@me", "query": "private note kites"})
        contents = [m["content"] for m in got["messages"]]
        if got["resolved_agent_id"] != aliases[sub] or contents != [
            f"{sub} private note about kites"
        ]:
            return str(got)
        return None

    callers = {sub: user(issuer, sub) for sub in ("c1", "c2")}
    assert await interleaved(server.url, callers, one_call, tasks=3, steps=6) == []


@pytest.mark.anyio
async def test_http_subjects_ledger_survives_a_restart(server, s1, work, issuer):
    assert server.stop() == 0, server.stderr
    again = make_server(work, issuer)
    again.db = server.db
    again.start()
    try:
        async with connect(again.url, user(issuer, "s1")) as tools:
            found = await tools("recall", {"agent_id": "@me", "query": "locker code"})
        assert found["resolved_agent_id"] == s1["alias"] and "alias_issued" not in found
        assert SECRET in [m["content"] for m in found["messages"]]
    finally:
        assert again.stop() == 0, again.stderr


# --------------------------------------------------------------------------- start-up refusals


def seed_database(db: Path, agent: str) -> None:
    from cpersona.config import Settings
    from cpersona.embedding.hashing import HashingProvider
    from cpersona.engine import Engine

    engine = Engine(Settings(db_path=str(db), embedding_mode="hashing"), embedder=HashingProvider())
    try:
        assert engine.writer.store(agent, {"content": "pre-existing"}, "", "")["result"] == "stored"
    finally:
        engine.close()


@pytest.mark.parametrize("agent", ["@me", "u-00000000abcd"])
def test_http_subjects_database_with_reserved_ids_refuses_start(tmp_path, issuer, agent):
    srv = make_server(tmp_path, issuer)
    seed_database(srv.db, agent)
    srv.launch()
    assert srv.wait_exit() == 2
    refusal = [line for line in srv.stderr.splitlines() if line.startswith("cpersona: ")]
    assert len(refusal) == 1 and repr(agent) in refusal[0], srv.stderr
    assert "refusing to start in per-subject mode" in refusal[0]
    assert "url:" not in srv.stderr  # never served


def test_http_subjects_alias_issued_by_the_ledger_starts(tmp_path, issuer):
    srv = make_server(tmp_path, issuer)
    seed_database(srv.db, "u-00000000abcd")
    ledger = {"version": 1, "aliases": {issuer.url: {"someone": "u-00000000abcd"}}}
    (tmp_path / "alias_ledger.json").write_text(json.dumps(ledger), encoding="utf-8")
    srv.start()
    try:
        # served: the subject that owns the alias finds the row written before
        token = issuer.token(sub="someone", client_id="chat")
        answer = post(srv.url, tools_call("list_memories", {"agent_id": "@me"}), auth(token))
        assert answer.status_code == 200 and "pre-existing" in answer.text, answer.text
    finally:
        assert srv.stop() == 0, srv.stderr


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def tools_call(name: str, args: dict[str, Any]) -> bytes:
    return json.dumps({
        "jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": name, "arguments": args},
    }).encode()  # fmt: skip


@pytest.mark.parametrize(
    "text",
    [
        "{not json",
        json.dumps({"version": 2, "aliases": {}}),
        json.dumps({"version": 1, "aliases": {"iss": {"a": "alias-1"}}}),
        json.dumps({"version": 1, "aliases": DUPLICATE}),
    ],
    ids=["not-json", "version", "bad-alias", "duplicate-alias"],
)
def test_http_subjects_unparseable_ledger_refuses_start(tmp_path, issuer, text):
    ledger = tmp_path / "ledger" / "aliases.json"
    ledger.parent.mkdir()
    ledger.write_text(text, encoding="utf-8")
    srv = make_server(tmp_path, issuer)
    srv.env["CPERSONA_ALIAS_LEDGER_FILE"] = str(ledger)
    srv.launch()
    assert srv.wait_exit() == 2
    lines = srv.stderr.splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"cpersona: CPERSONA_ALIAS_LEDGER_FILE={ledger}: "), lines
    assert not srv.db.exists()
    assert ledger.read_text(encoding="utf-8") == text  # never rewritten


@pytest.mark.anyio
async def test_http_subjects_stdio_local_cannot_use_reserved_ids(tmp_path, issuer):
    import sys

    from mcp import Client, StdioServerParameters
    from support.http_server import WAIT

    acl = tmp_path / "acl.json"
    rows = [*acl_rows(issuer), {"client_id": "local", "token": None, "grants": {"*": "read-write"}}]
    acl.write_text(json.dumps({"clients": rows}), encoding="utf-8")
    env = inherited()
    env.update({
        "CPERSONA_DB_PATH": str(tmp_path / "stdio.db"),
        "CPERSONA_EMBEDDING_MODE": "hashing",
        "CPERSONA_ACL_FILE": str(acl),
    })  # fmt: skip
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "cpersona"], env=env, cwd=str(tmp_path)
    )
    async with Client(params, read_timeout_seconds=WAIT) as mcp:
        for agent in ("@me", "u-0123456789ab"):
            answer = json.loads(
                (await mcp.call_tool("store", {"agent_id": agent, "message": {"content": "x"}}))
                .content[0]
                .text
            )
            assert answer["error"] == "permission_denied" and answer["client_id"] == "local"
        ok = await mcp.call_tool("store", {"agent_id": "alpha", "message": {"content": "x"}})
        assert json.loads(ok.content[0].text)["result"] == "stored"
