"""What servers on one database share (issue 19 item 3; docs/scale-out.md, "Shared state").

Two real HTTP server processes on one database, through the official MCP client, as two hosts
behind a load balancer: on PostgreSQL a pause taken on server A (a declared `session_key`, and
the keyless bucket) is honoured by server B, which answers the same deadline and can end it;
on SQLite (one host, one server per file) a pause stays the process's own, as surface.md §10.2
says. In per-subject mode on PostgreSQL, new subjects arriving at both servers at the same
moment get one alias each, the same from both, issued (`alias_issued`) by exactly one call; an
existing ledger file is imported with its ids, and a file that disagrees with the database
refuses start-up.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from child_env import inherited
from oauth_support import RESOURCE, TestIssuer
from pg_support import drop_database, fresh_database
from support.http_server import HttpServer, connect

pytestmark = pytest.mark.anyio

TOKEN = "shared-state-token"
#: Issued by an earlier server to a subject and kept in its ledger file.
OLD_ALIAS = "u-00000000abcd"


def two_servers(work: Path, url: str | None, env: dict[str, str]) -> list[HttpServer]:
    """Servers A and B on one database (`url`, else one SQLite file), own cache each."""
    servers = []
    for name in ("a", "b"):
        srv = HttpServer(work, {
            **inherited("LANG"),
            "CPERSONA_CACHE_DIR": str(work / f"cache-{name}"),
            "CPERSONA_DB_PATH": str(work / "shared.db"),
            **({"CPERSONA_DATABASE_URL": url} if url else {}),
            **env,
        }, name=name)  # fmt: skip
        servers.append(srv)
    return servers


@pytest.fixture(params=["sqlite", "postgresql"])
def pair(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, list[str]]]:
    url = fresh_database() if request.param == "postgresql" else None
    servers = two_servers(tmp_path, url, {"CPERSONA_AUTH_TOKEN": TOKEN})
    try:
        for srv in servers:
            srv.start()
        yield request.param, [srv.url for srv in servers]
    finally:
        for srv in servers:
            assert srv.stop() == 0, srv.stderr
        if url:
            drop_database(url)


def note(content: str, key: str | None) -> dict[str, Any]:
    args: dict[str, Any] = {"agent_id": "shared", "message": {"content": content}}
    if key is not None:
        args["session_key"] = key
    return args


async def test_a_pause_taken_on_one_server_is_honoured_by_the_other(pair):
    backend, (url_a, url_b) = pair
    shared = backend == "postgresql"
    async with connect(url_a, TOKEN) as a, connect(url_b, TOKEN) as b:
        taken = await a("pause_persistence", {"session_key": "k1", "ttl_seconds": 600})
        assert taken["paused"] is True and taken["scope"] == "session"
        seen = await b("persistence_status", {"session_key": "k1"})
        skipped = await b("store", note("written on B while k1 is paused on A", "k1"))
        other_key = await b("store", note("another session is not paused", "k2"))
        assert other_key["result"] == "stored"
        if shared:
            assert seen["paused"] is True and seen["expires_at"] == taken["expires_at"]
            assert 0 < seen["ttl_remaining_seconds"] <= 600
            assert skipped["persisted"] is False and skipped["result"] == "skipped"
            assert skipped["reason"].startswith("session no-persist mode active (")
            # B can end A's pause, and A sees it ended.
            assert (await b("resume_persistence", {"session_key": "k1"}))["was_active"] is True
            assert (await a("persistence_status", {"session_key": "k1"}))["paused"] is False
        else:  # one process's pause (surface.md §10.2): B never heard of it
            assert seen["paused"] is False and skipped["result"] == "stored"
            assert (await b("resume_persistence", {"session_key": "k1"}))["was_active"] is False
            assert (await a("persistence_status", {"session_key": "k1"}))["paused"] is True
        # The keyless bucket spans the keyless clients of the deployment over HTTP.
        await a("pause_persistence", {"ttl_seconds": 600})
        keyless = await b("persistence_status", {})
        assert keyless["scope"] == "process" and keyless["paused"] is shared
        stored = await b("store", note("keyless write on B", None))
        assert stored["result"] == ("skipped" if shared else "stored")
        listed = await a("list_memories", {"agent_id": "shared"})
    contents = {m["content"] for m in listed["memories"]}
    assert "another session is not paused" in contents
    assert ("written on B while k1 is paused on A" in contents) is not shared
    assert ("keyless write on B" in contents) is not shared


# -- the alias ledger ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def issuer() -> Iterator[TestIssuer]:
    issuer = TestIssuer(algs=("ES256",))
    yield issuer
    issuer.close()


def subject_env(work: Path, issuer: TestIssuer) -> dict[str, str]:
    acl = work / "acl.json"
    rows = [{"client_id": f"oauth:{issuer.url}:chat", "token": None,
             "grants": {"*": "read-write"}, "per_subject": True}]  # fmt: skip
    acl.write_text(json.dumps({"clients": rows}), encoding="utf-8")
    acl.chmod(0o600)
    return {
        "CPERSONA_ACL_FILE": str(acl),
        "CPERSONA_OAUTH_RESOURCE": RESOURCE,
        "CPERSONA_OAUTH_AUTHORIZATION_SERVERS": issuer.url,
    }


def write_ledger(path: Path, aliases: dict[str, dict[str, str]]) -> None:
    path.write_text(json.dumps({"version": 1, "aliases": aliases}), encoding="utf-8")
    path.chmod(0o600)


@pytest.fixture
def subject_pair(tmp_path: Path, issuer: TestIssuer) -> Iterator[tuple[Path, str, list[str]]]:
    url = fresh_database()
    write_ledger(tmp_path / "alias_ledger.json", {issuer.url: {"old-user": OLD_ALIAS}})
    servers = two_servers(tmp_path, url, subject_env(tmp_path, issuer))
    try:
        for srv in servers:
            srv.start()
        yield tmp_path, url, [srv.url for srv in servers]
    finally:
        for srv in servers:
            assert srv.stop() == 0, srv.stderr
        drop_database(url)


async def test_new_subjects_at_two_servers_at_once_get_one_alias_each(subject_pair, issuer):
    _, _, urls = subject_pair
    answers: dict[str, list[dict[str, Any]]] = {}

    async def first_call(sub: str, url: str) -> None:
        async with connect(url, issuer.token(sub=sub, client_id="chat")) as tools:
            got = await tools("list_memories", {"agent_id": "@me"})
        answers.setdefault(sub, []).append(got)

    subjects = [f"new-{i}" for i in range(8)]
    async with anyio.create_task_group() as tg:
        for sub in subjects:
            for url in urls:  # the same new subject at both servers at the same moment
                tg.start_soon(first_call, sub, url)
    aliases = {}
    for sub in subjects:
        got = answers[sub]
        assert len(got) == 2
        assert got[0]["resolved_agent_id"] == got[1]["resolved_agent_id"], got
        assert [a.get("alias_issued", False) for a in got].count(True) == 1, got
        aliases[sub] = got[0]["resolved_agent_id"]
    assert len(set(aliases.values())) == len(subjects)
    assert OLD_ALIAS not in aliases.values()
    # Later calls at either server keep the alias, and issue nothing.
    for url in urls:
        async with connect(url, issuer.token(sub="new-0", client_id="chat")) as tools:
            again = await tools("store", {"agent_id": "@me", "message": {"content": "hi"}})
        assert again["resolved_agent_id"] == aliases["new-0"] and "alias_issued" not in again


async def test_a_ledger_file_is_imported_with_its_ids(subject_pair, issuer, tmp_path_factory):
    _, url, urls = subject_pair
    for url_ in urls:
        async with connect(url_, issuer.token(sub="old-user", client_id="chat")) as tools:
            got = await tools("list_memories", {"agent_id": "@me"})
        assert got["resolved_agent_id"] == OLD_ALIAS and "alias_issued" not in got
    # A third server with no ledger file of its own knows the imported alias: the database has it.
    elsewhere = tmp_path_factory.mktemp("no-file")
    third = two_servers(elsewhere, url, subject_env(elsewhere, issuer))[0]
    third.start()
    try:
        async with connect(third.url, issuer.token(sub="old-user", client_id="chat")) as tools:
            got = await tools("list_memories", {"agent_id": "@me"})
        assert got["resolved_agent_id"] == OLD_ALIAS and "alias_issued" not in got
    finally:
        assert third.stop() == 0, third.stderr
    assert not (elsewhere / "alias_ledger.json").exists()  # the database is the ledger


async def test_a_ledger_file_that_disagrees_with_the_database_refuses_start(
    subject_pair, issuer, tmp_path_factory
):
    _, url, urls = subject_pair
    async with connect(urls[0], issuer.token(sub="fresh", client_id="chat")) as tools:
        issued = (await tools("list_memories", {"agent_id": "@me"}))["resolved_agent_id"]
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    ledger = elsewhere / "alias_ledger.json"
    write_ledger(ledger, {issuer.url: {"fresh": "u-ffffffffffff"}})
    late = two_servers(elsewhere, url, subject_env(elsewhere, issuer))[0]
    late.launch()
    try:
        assert late.wait_exit() == 2
    finally:
        late.stop()
    assert "the alias ledger disagrees with the one in the database" in late.stderr
    assert "u-ffffffffffff" in late.stderr and issued != "u-ffffffffffff"
    # Nothing of the refused file was imported: the subject keeps its alias.
    async with connect(urls[1], issuer.token(sub="fresh", client_id="chat")) as tools:
        assert (await tools("list_memories", {"agent_id": "@me"}))["resolved_agent_id"] == issued
