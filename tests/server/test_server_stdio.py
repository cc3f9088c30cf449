"""Real server processes, started the way an MCP client starts them (`python -m cpersona` on
stdio, `CPERSONA_EMBEDDING_MODE=hashing` so no model loads).

(a) the official stdio client lists tools and stores; stdout carries only protocol, the banner
goes to stderr; (b) malformed lines on stdin never kill the server; (c) a server killed with
SIGKILL mid-stream loses no acknowledged store; (d) two servers on one file store concurrently
without an error or a lost row. Every loop is bounded by a count and every wait by a timeout.
"""

from __future__ import annotations

import json
import sqlite3
import sys
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import anyio
import pytest
from cpersona import __version__
from mcp import Client, StdioServerParameters
from support.jsonrpc import deep_json, store_with_metadata
from support.stdio_server import WAIT, RawServer, server_env

MY_TOOLS = {
    "store", "archive_episode", "update_memory", "lock_memory", "unlock_memory", "delete_memory",
    "delete_episode", "get_profile", "update_profile", "list_memories", "list_episodes",
}  # fmt: skip


def params(db: Path) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable, args=["-m", "cpersona"], env=server_env(db), cwd=str(db.parent)
    )


def decode(result: Any) -> dict[str, Any]:
    assert not result.is_error, result.content[0].text
    return json.loads(result.content[0].text)


def db_rows(db: Path) -> dict[int, tuple[str, str, str]]:
    with closing(sqlite3.connect(db)) as conn:
        rows = conn.execute("SELECT id, agent_id, msg_id, content FROM memories").fetchall()
        return {r[0]: (r[1], r[2], r[3]) for r in rows}


def integrity(db: Path) -> str:
    with closing(sqlite3.connect(db)) as conn:
        return conn.execute("PRAGMA integrity_check").fetchone()[0]


@pytest.fixture
def raw_server(tmp_path: Path) -> Iterator[Any]:
    servers: list[RawServer] = []

    def start(db: Path | None = None) -> RawServer:
        server = RawServer(db or tmp_path / "mem.db")
        servers.append(server)
        return server

    yield start
    for server in servers:
        if server.proc.poll() is None:
            server.proc.kill()
        if not server._stderr.closed:
            server.close()


# -- (a) the official client -------------------------------------------------------------------


@pytest.mark.anyio
async def test_official_stdio_client_lists_tools_and_stores(tmp_path):
    db = tmp_path / "mem.db"
    with anyio.fail_after(4 * WAIT):
        async with Client(params(db)) as client:
            assert client.server_info.name == "cloto-mcp-cpersona"
            names = {t.name for t in (await client.list_tools()).tools}
            assert names >= MY_TOOLS
            out = decode(
                await client.call_tool(
                    "store",
                    {"agent_id": "alice", "message": {"id": "m1", "content": "会議は火曜日"}},
                )
            )
            assert out == {"ok": True, "result": "stored", "id": 1, "embedded": True}
            listed = decode(await client.call_tool("list_memories", {"agent_id": "alice"}))
            assert [m["content"] for m in listed["memories"]] == ["会議は火曜日"]
            unknown = await client.call_tool("nope", {})
            assert json.loads(unknown.content[0].text) == {"error": "Unknown tool: nope"}
    assert db_rows(db) == {1: ("alice", "m1", "会議は火曜日")}


def test_stdout_carries_only_protocol_and_the_banner_goes_to_stderr(raw_server, tmp_path):
    server = raw_server()
    init = server.initialize()
    assert init["result"]["serverInfo"]["name"] == "cloto-mcp-cpersona"
    assert "tools" in init["result"]["capabilities"]
    assert server.call("ping")["result"] == {}
    tools = server.call("tools/list")["result"]["tools"]
    assert {t["name"] for t in tools} >= MY_TOOLS
    assert server.tool("store", {"agent_id": "a", "message": {"content": "x"}})["ok"] is True
    assert server.tool("list_memories", {})["count"] == 1
    assert server.close() == 0
    assert server.lines, "no protocol output"
    for line in server.lines:
        message = json.loads(line)  # every stdout line is one JSON-RPC message
        assert message["jsonrpc"] == "2.0"
    err = server.stderr
    assert f"cpersona {__version__}: MCP memory server on stdio" in err
    assert str(tmp_path / "mem.db") in err
    assert "Traceback" not in err


# -- (b) malformed input on the wire -------------------------------------------------------------

GARBAGE: list[str | bytes] = [
    "not json at all",
    '{"jsonrpc": "2.0", "id": 2',
    "[]",
    "{}",
    "null",
    "42",
    '"a string"',
    "",
    "   ",
    b"\xff\xfe\x00 not utf-8",
    '{"jsonrpc":"2.0","id":9}',
    '{"jsonrpc":"1.0","id":10,"method":"tools/list"}',
    '{"jsonrpc":"2.0","id":11,"method":"tools/call"}',
    '{"jsonrpc":"2.0","id":12,"method":"tools/call","params":{"name":"store","arguments":"x"}}',
    '{"jsonrpc":"2.0","id":13,"method":"tools/call","params":{"arguments":{}}}',
    '{"jsonrpc":"2.0","id":14,"method":"no/such/method","params":{}}',
    '{"jsonrpc":"2.0","id":{"nested":1},"method":"ping"}',
    '{"jsonrpc":"2.0","method":"notifications/unknown"}',
    '{"jsonrpc":"2.0","id":15,"method":"tools/call","params":{"name":"\\ud800","arguments":{}}}',
    "x" * 200_000,
    # Nesting deeper than any JSON parser's recursion limit, with and without a surrogate escape.
    '{"jsonrpc":"2.0","id":17,"method":"tools/call","params":{"name":"store","arguments":'
    '{"agent_id":"a","message":{"content":"x","metadata":'
    + '{"k":' * 100_000
    + "1"
    + "}" * 100_000
    + "}}}}",
    '{"jsonrpc":"2.0","id":18,"method":"tools/call","params":{"name":"store","arguments":'
    '{"agent_id":"\\ud800","message":{"content":"x","metadata":'
    + '{"k":' * 100_000
    + "1"
    + "}" * 100_000
    + "}}}}",
    '{"jsonrpc":"2.0","id":16,"method":"tools/call","params":{"name":"store","arguments":'
    '{"agent_id":"a","message":{"content":"' + "y" * 1_000_000 + '"}}}}',
]


def test_malformed_lines_do_not_kill_the_server(raw_server, tmp_path):
    server = raw_server()
    server.initialize()
    for line in GARBAGE:
        server.send(line)
    out = server.tool("store", {"agent_id": "alice", "message": {"content": "after the storm"}})
    assert out["result"] == "stored"
    assert server.proc.poll() is None
    # The one well-formed store among the garbage (1 MB of content) was cut at the cap.
    big = json.loads(server.answer(16)["result"]["content"][0]["text"])
    assert big["result"] == "stored" and big["truncated"] is True
    rows = db_rows(tmp_path / "mem.db")
    assert sorted(c for _, _, c in rows.values()) == ["after the storm", "y" * 16000]
    assert server.close() == 0
    assert "Traceback" not in server.stderr


def test_lone_surrogates_on_the_wire_are_answered_and_refused(raw_server, tmp_path):
    """A JSON escape of a lone surrogate (an emoji cut in half by a UTF-16 client) gets the
    tool's refusal, not silence; nothing is written and the server keeps serving."""
    server = raw_server()
    server.initialize()
    calls = [
        (
            '"store"',
            '{"agent_id":"a","message":{"content":"half an emoji \\ud83d"}}',
            "reason",
            "message.content",
        ),
        ('"store"', '{"agent_id":"\\udc00","message":{"content":"x"}}', "reason", "agent_id"),
        (
            '"store"',
            '{"agent_id":"a","message":{"content":"x","source":{"\\ud800":"k"}}}',
            "reason",
            "a key of message.source",
        ),
        ('"update_profile"', '{"agent_id":"a","profile":"p\\ud800"}', "error", "profile"),
        ('"list_memories"', '{"agent_id":"\\ud800"}', "error", "agent_id"),
    ]
    for i, (name, arguments, key, where) in enumerate(calls):
        server.send(
            f'{{"jsonrpc":"2.0","id":{i + 1},"method":"tools/call",'
            f'"params":{{"name":{name},"arguments":{arguments}}}}}'
        )
        answer = server.answer(i + 1)
        text = answer["result"]["content"][0]["text"]
        out = json.loads(text)
        assert out["ok"] is False and where in out[key] and "surrogate" in out[key], out
    assert db_rows(tmp_path / "mem.db") == {}
    assert server.tool("store", {"agent_id": "a", "message": {"content": "ok"}})["ok"] is True
    assert server.close() == 0


#: (line, the code of its answer, the id of its answer): every malformed request with an id is
#: answered, with that id when it is a valid one (JSON-RPC 2.0 §5).
MALFORMED: list[tuple[str | bytes, int, Any]] = [
    ('{"jsonrpc":"2.0","id":2,"method":"tools/call","params":"store"}', -32602, 2),
    ('{"jsonrpc":"2.0","id":"s3","method":"tools/call","params":["store",{}]}', -32602, "s3"),
    ('{"jsonrpc":"2.0","id":4,"method":"tools/list","params":7}', -32602, 4),
    (store_with_metadata(5, deep_json(200)), -32602, 5),  # 205 levels with the envelope
    (store_with_metadata(6, deep_json(100_000)), -32602, 6),  # past Python's json too
    ('{"jsonrpc":"2.0","id":7,"method":"ping","params":{},"x":' + deep_json(300) + "}", -32600, 7),
    ('{"jsonrpc":"2.0","id":8}', -32600, 8),
    ('{"jsonrpc":"1.0","id":9,"method":"tools/list"}', -32600, 9),
    ('{"jsonrpc":"2.0","id":10,"method":42}', -32600, 10),
    ('{"jsonrpc":"2.0","id":1.5,"method":"ping"}', -32600, None),
    ('{"jsonrpc":"2.0","id":true,"method":"ping"}', -32600, None),
    ('{"jsonrpc":"2.0","id":null,"method":"ping"}', -32600, None),
    ('[{"jsonrpc":"2.0","id":11,"method":"ping"}]', -32600, None),
    ("42", -32600, None),
    ("not json at all", -32700, None),
    ('{"jsonrpc": "2.0", "id": 12', -32700, None),
    (b"\xff\xfe not utf-8", -32700, None),
    # What the SDK itself answers (argument and method errors), unchanged:
    ('{"jsonrpc":"2.0","id":13,"method":"tools/call"}', -32602, 13),
    ('{"jsonrpc":"2.0","id":14,"method":"no/such/method","params":{}}', -32601, 14),
]


def test_every_malformed_request_with_an_id_is_answered(raw_server, tmp_path):
    """One line at a time, each answered before the next is sent: the answer is an error with
    the right JSON-RPC code and the request's id; the server serves normally afterwards."""
    server = raw_server()
    server.initialize()
    for line, code, request_id in MALFORMED:
        server.send(line)
        answer = server.answer(request_id)
        assert answer["error"]["code"] == code, (line[:80], answer)
        assert "result" not in answer
    # Nesting within the parser's reach is served: 199 levels of metadata (204 in all) fit.
    ok = server.call(
        "tools/call",
        {"name": "store", "arguments": {"agent_id": "a", "message": {"content": "x"}}},
    )
    assert json.loads(ok["result"]["content"][0]["text"])["result"] == "stored"
    server.send(store_with_metadata(15, deep_json(195)))
    assert "result" in server.answer(15)
    # Notifications get no answer, malformed or not; blank lines are not messages.
    for line in ('{"jsonrpc":"2.0","method":"notifications/x","params":"p"}', "", "   "):
        server.send(line)
    assert server.call("ping")["result"] == {}
    assert server.proc.poll() is None
    assert server.close() == 0
    for line in server.lines:  # every answer, the refusals included, is one JSON-RPC message
        assert json.loads(line)["jsonrpc"] == "2.0"
    # Only the two well-formed stores were written.
    assert sorted(c for _, _, c in db_rows(tmp_path / "mem.db").values()) == ["deep 15", "x"]
    assert "Traceback" not in server.stderr


# -- (c) crash durability ------------------------------------------------------------------------


def test_sigkill_mid_stream_loses_no_acknowledged_store(raw_server, tmp_path):
    db = tmp_path / "mem.db"
    server = raw_server(db)
    server.initialize()
    total, kill_after = 120, 40
    sent: dict[int, str] = {}
    for i in range(total):  # pipelined: the server is mid-stream when it dies
        content = f"durable note {i}: " + "z" * (1 + i % 7)
        rid = server.request(
            "tools/call",
            {
                "name": "store",
                "arguments": {"agent_id": "alice", "message": {"id": f"n{i}", "content": content}},
            },
        )
        sent[rid] = content
    acknowledged: dict[int, str] = {}
    for rid in list(sent)[:kill_after]:
        out = json.loads(server.answer(rid)["result"]["content"][0]["text"])
        assert out["result"] == "stored", out
        acknowledged[out["id"]] = sent[rid]
    # Every answer already written to stdout counts as acknowledged too.
    server.kill()
    for line in list(server.lines):
        message = json.loads(line)
        if message.get("id") in sent and "result" in message:
            out = json.loads(message["result"]["content"][0]["text"])
            if out.get("result") == "stored":
                acknowledged[out["id"]] = sent[message["id"]]
    assert len(acknowledged) >= kill_after

    restarted = raw_server(db)
    restarted.initialize()
    listed = restarted.tool("list_memories", {"agent_id": "alice", "limit": 500})
    found = {m["id"]: m["content"] for m in listed["memories"]}
    for memory_id, content in acknowledged.items():
        assert found.get(memory_id) == content, memory_id
    # A re-sent store of an acknowledged message is a duplicate, not a second row.
    first_id, first_content = next(iter(acknowledged.items()))
    again = restarted.tool(
        "store", {"agent_id": "alice", "message": {"id": "n0", "content": first_content}}
    )
    assert again == {"ok": True, "result": "skipped", "reason": "duplicate msg_id", "id": first_id}
    assert restarted.close() == 0
    assert integrity(db) == "ok"
    # Rows are whole: every row is one of the contents that was sent.
    assert set(db_rows(db)) == set(found)
    assert {c for _, _, c in db_rows(db).values()} <= set(sent.values())


# -- (d) two servers on one file -----------------------------------------------------------------


@pytest.mark.anyio
async def test_two_servers_on_one_file_store_concurrently(tmp_path):
    db = tmp_path / "shared.db"
    per_server, lanes = 100, 4
    results: dict[str, list[tuple[str, str, dict[str, Any]]]] = {"p0": [], "p1": []}

    async def lane(client: Client, name: str, lane_no: int) -> None:
        for i in range(lane_no, per_server, lanes):
            if i % 5 == 0:  # the same msg_id from both servers
                msg_id, content = f"shared-{i}", f"{name} wrote shared {i}"
            else:
                msg_id, content = f"{name}-{i}", f"{name} note {i}"
            out = decode(
                await client.call_tool(
                    "store", {"agent_id": "team", "message": {"id": msg_id, "content": content}}
                )
            )
            results[name].append((msg_id, content, out))

    async def run_server(name: str) -> None:
        async with Client(params(db)) as client, anyio.create_task_group() as tg:
            for lane_no in range(lanes):
                tg.start_soon(lane, client, name, lane_no)

    with anyio.fail_after(8 * WAIT):
        async with anyio.create_task_group() as tg:
            tg.start_soon(run_server, "p0")
            tg.start_soon(run_server, "p1")

    rows = db_rows(db)
    stored: dict[int, tuple[str, str]] = {}
    by_msg: dict[str, list[dict[str, Any]]] = {}
    for name in ("p0", "p1"):
        assert len(results[name]) == per_server
        for msg_id, content, out in results[name]:
            assert "error" not in out and out["ok"] is True, out
            assert out["result"] in ("stored", "skipped"), out
            by_msg.setdefault(msg_id, []).append(out)
            if out["result"] == "stored":
                assert out["id"] not in stored
                stored[out["id"]] = (msg_id, content)
            else:
                assert msg_id.startswith("shared-"), out
    # No lost row, no extra row: the table is exactly the acknowledged stores.
    assert {i: (m, c) for i, (_, m, c) in rows.items()} == stored
    for msg_id, outs in by_msg.items():
        if msg_id.startswith("shared-"):
            assert sorted(o["result"] for o in outs) == ["skipped", "stored"], outs
            [winner] = [o["id"] for o in outs if o["result"] == "stored"]
            [loser] = [o for o in outs if o["result"] == "skipped"]
            assert loser.get("id", winner) == winner
        else:
            assert [o["result"] for o in outs] == ["stored"]
    assert len(rows) == 2 * per_server - per_server // 5
    assert integrity(db) == "ok"
