"""The stdio→HTTP bridge (surface.md §11.6): `python -m cpersona.proxy_stdio` as a client sees it.

(a) The official MCP client, speaking stdio to the bridge, drives a real cpersona HTTP server
through every one of the 34 tools, and the writes land in the server's database. (b) Against a
scripted HTTP peer on loopback: SSE-framed and JSON answers are relayed line by line; a peer that
dies mid-call, never answers, refuses the token or is not there gives each request one JSON-RPC
error -32000 and notifications none; a line that is not JSON gets -32700; in-flight requests
never exceed the bound; stdin EOF answers what is in flight, then exits 0. Every wait is bounded.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import anyio
import pytest
from child_env import inherited
from cpersona.server.tools import REGISTRATION_ORDER
from mcp import Client, StdioServerParameters
from support.http_server import WAIT, HttpServer
from support.local_http import LocalServer
from support.stdio_server import RawServer

TOKEN = "bridge-token-0123"


def bridge_env(url: str, token: str | None = TOKEN, **extra: str) -> dict[str, str]:
    env = inherited()
    env["CPERSONA_REMOTE_URL"] = url
    if token is not None:
        env["CPERSONA_AUTH_TOKEN"] = token
    return {**env, **extra}


# -- (a) a real server through the bridge ------------------------------------------------------


@pytest.fixture
def server(tmp_path: Path) -> Iterator[HttpServer]:
    exports = tmp_path / "exports"
    exports.mkdir()
    # rsf: under the default rrf the contract's heuristic gate (retrieval.md §7.3, rrf >= m_eff
    # * 3/(k+1)) drops a keyword-only match in a two-row corpus; this test is about relaying.
    env = {
        "CPERSONA_AUTH_TOKEN": TOKEN,
        "CPERSONA_EXPORT_DIR": str(exports),
        "CPERSONA_RECALL_MODE": "rsf",
    }
    srv = HttpServer(tmp_path, env)
    srv.start()
    yield srv
    srv.stop()


def decode(result: Any) -> dict[str, Any]:
    assert not result.is_error, result.content[0].text
    return json.loads(result.content[0].text)


@pytest.mark.anyio
async def test_bridge_drives_every_tool_of_a_real_http_server(server: HttpServer):
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "cpersona.proxy_stdio"], env=bridge_env(server.url)
    )
    called: list[str] = []

    with anyio.fail_after(6 * WAIT):
        async with Client(params) as client:

            async def call(name: str, args: dict[str, Any]) -> dict[str, Any]:
                called.append(name)
                return decode(await client.call_tool(name, args))

            listed = {t.name for t in (await client.list_tools()).tools}
            assert listed == set(REGISTRATION_ORDER)

            a = {"agent_id": "alice"}
            paused = await call("pause_persistence", {"session_key": "s1", "ttl_seconds": 60})
            assert paused["paused"] is True
            assert (await call("persistence_status", {"session_key": "s1"}))["paused"] is True
            assert (await call("resume_persistence", {"session_key": "s1"}))["was_active"] is True
            assert (await call("get_operating_context", {}))["enabled"] is False
            first = await call("store", {**a, "message": {"content": "the meeting is on Tuesday"}})
            second = await call("store", {**a, "message": {"content": "会議は火曜日に移った"}})
            assert (first["result"], second["result"]) == ("stored", "stored")
            found = await call("recall", {**a, "query": "meeting Tuesday"})
            assert f"mem:{first['id']}" in [m["ref"] for m in found["messages"]]
            context = await call("recall_with_context", {**a, "query": "火曜日"})
            assert [m["content"] for m in context["messages"]] == ["会議は火曜日に移った"]
            contents = await call("get_contents", {**a, "refs": [f"mem:{first['id']}"]})
            assert [i["content"] for i in contents["items"]] == ["the meeting is on Tuesday"]
            declared = await call(
                "declare_associations",
                {**a, "anchor_ref": f"mem:{first['id']}",
                 "associations": {"entities": [{"name": "meeting"}]}},
            )  # fmt: skip
            assert declared["result"] == "declared"
            walked = await call("traverse", {**a, "entity": "Meeting"})
            assert walked["entities"][0]["mentions"] == [f"mem:{first['id']}"]
            items = await call("reconstruct", {**a, "query": "meeting Tuesday"})
            assert f"mem:{first['id']}" in [i["head_ref"] for i in items["items"]]
            assert (await call("update_profile", {**a, "profile": "likes tea"}))["ok"] is True
            assert (await call("get_profile", a))["profile"] == "likes tea"
            episode = await call("archive_episode", {**a, "summary": "planning the week"})
            listing = await call("list_memories", a)
            assert [m["id"] for m in listing["memories"]] == [second["id"], first["id"]]
            assert (await call("list_episodes", a))["count"] == 1
            d = {"agent_id": "dave"}
            drinks = ("tea", "coffee", "water", "juice", "milk", "soda")
            for i in range(12):
                note = f"dave's note {i}: {drinks[i % 6]}"
                await call("store", {**d, "message": {"content": note}})
            calibrated = await call("calibrate_threshold", d)
            assert calibrated["ok"] is True, calibrated
            assert (await call("set_recall_precision", {**d, "precision": "strict"}))["ok"]
            assert (await call("get_recall_precision", d))["precision"] == "strict"
            updated = await call("update_memory", {**a, "memory_id": second["id"], "content": "x"})
            assert updated == {"ok": True, "updated_id": second["id"]}
            assert (await call("lock_memory", {**a, "memory_id": first["id"]}))["ok"] is True
            assert (await call("unlock_memory", {**a, "memory_id": first["id"]}))["ok"] is True
            assert (await call("get_queue_status", {}))["pending"] == 0
            exported = await call("export_memories", {**a, "output_path": "alice.jsonl"})
            assert (exported["memories"], exported["episodes"]) == (2, 1)
            imported = await call(
                "import_memories", {"input_path": "alice.jsonl", "target_agent_id": "bob"}
            )
            assert imported["imported_memories"] == 2
            merged = await call(
                "merge_memories",
                {"source_agent_id": "bob", "target_agent_id": "carol", "dry_run": True},
            )
            assert (merged["dry_run"], merged["merged_memories"]) == (True, 2)
            assert (await call("check_health", a))["total_memories"] == 2
            assert "findings" in await call("get_session_findings", {})
            assert (await call("deep_check", a))["agent_id"] == "alice"
            migrated = await call("migrate_channel_axis", {**a, "dry_run": True})
            assert migrated["migrated"] == 0
            assert (await call("check_update", {}))["state"] == "disabled"
            deleted = await call("delete_memory", {**a, "memory_id": second["id"]})
            assert deleted == {"ok": True, "deleted_id": second["id"]}
            gone = await call("delete_episode", {**a, "episode_id": episode["episode_id"]})
            assert gone["ok"] is True
            wiped = await call("delete_agent_data", {"agent_id": "bob"})
            assert wiped["deleted_memories"] == 2

    assert set(called) == set(REGISTRATION_ORDER)
    with closing(sqlite3.connect(server.db)) as conn:
        rows = conn.execute(
            "SELECT agent_id, content FROM memories WHERE agent_id <> 'dave' ORDER BY id"
        ).fetchall()
    assert rows == [("alice", "the meeting is on Tuesday")]


def test_bridge_answers_with_errors_after_the_server_is_killed(server: HttpServer):
    bridge = RawBridge(bridge_env(server.url))
    assert "result" in bridge.call(1, "tools/list")
    assert server.proc is not None
    server.proc.kill()
    server.proc.wait(timeout=WAIT)
    answer = bridge.call(2, "tools/list")
    assert answer["error"]["code"] == -32000
    assert "cannot connect" in answer["error"]["message"]
    assert bridge.close() == 0


# -- (b) a scripted peer -----------------------------------------------------------------------


class Peer:
    """A loopback HTTP server whose answer to each POST is `behaviour(body)`."""

    def __init__(self, behaviour: Callable[[BaseHTTPRequestHandler, bytes], None]) -> None:
        self.bodies: list[bytes] = []
        self.headers: list[dict[str, str]] = []
        self.active = 0
        self.most_active = 0
        lock = threading.Lock()
        peer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                with lock:
                    peer.bodies.append(body)
                    peer.headers.append({k.lower(): v for k, v in self.headers.items()})
                    peer.active += 1
                    peer.most_active = max(peer.most_active, peer.active)
                try:
                    behaviour(self, body)
                finally:
                    with lock:
                        peer.active -= 1

            def log_message(self, *args: object) -> None:
                pass

        self._server = LocalServer(Handler)
        self.url = f"{self._server.base}/mcp"

    def close(self) -> None:
        self._server.close()


@contextmanager
def peer(behaviour: Callable[[BaseHTTPRequestHandler, bytes], None]) -> Iterator[Peer]:
    p = Peer(behaviour)
    try:
        yield p
    finally:
        p.close()


def reply(handler: BaseHTTPRequestHandler, status: int, kind: str, body: bytes, **hdr: str):
    handler.send_response(status)
    handler.send_header("content-type", kind)
    handler.send_header("content-length", str(len(body)))
    for name, value in hdr.items():
        handler.send_header(name.replace("_", "-"), value)
    handler.end_headers()
    handler.wfile.write(body)


def echo_result(body: bytes, **result: Any) -> bytes:
    request = json.loads(body)
    return json.dumps({"jsonrpc": "2.0", "id": request["id"], "result": result}).encode()


class RawBridge(RawServer):
    """The bridge as a subprocess (the stdio server harness running `cpersona.proxy_stdio`), fed
    raw lines; answers are collected by id. It has no database: its directory holds its log."""

    def __init__(self, env: dict[str, str]) -> None:
        home = Path(tempfile.mkdtemp(prefix="cpersona-bridge-"))
        super().__init__(home / "bridge", env, argv=[sys.executable, "-m", "cpersona.proxy_stdio"])

    def call(self, request_id: Any, method: str, params: dict[str, Any] | None = None):
        self.send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params or {}})
        return self.answer(request_id)

    def close(self) -> int:
        """Ends the bridge; its log is kept in memory and its directory removed."""
        code = super().close()
        self._log = super().stderr
        shutil.rmtree(self.stderr_path.parent, ignore_errors=True)
        return code

    @property
    def stderr(self) -> str:
        log = getattr(self, "_log", None)
        return super().stderr if log is None else log

    @property
    def messages(self) -> list[dict[str, Any]]:
        """Every line the bridge wrote, parsed, in order."""
        return [json.loads(line) for line in self.lines]


def test_sse_and_json_answers_are_relayed_and_the_session_is_repeated():
    def behaviour(handler: BaseHTTPRequestHandler, body: bytes) -> None:
        message = json.loads(body)
        if message.get("method") == "initialize":
            payload = echo_result(body, protocolVersion="2025-06-18")
            event = b"event: message\ndata: " + payload + b"\n\n"
            reply(handler, 200, "text/event-stream", event, mcp_session_id="sess-42")
        elif "id" not in message:
            reply(handler, 202, "application/json", b"")
        else:
            reply(handler, 200, "application/json", echo_result(body, seen="json"))

    with peer(behaviour) as p:
        bridge = RawBridge(bridge_env(p.url))
        assert bridge.call(1, "initialize")["result"]["protocolVersion"] == "2025-06-18"
        bridge.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        assert bridge.call("two", "tools/list")["result"] == {"seen": "json"}
        assert bridge.close() == 0
    assert [line["id"] for line in bridge.messages] == [1, "two"]  # nothing for the notification
    later = p.headers[-1]
    assert later["mcp-session-id"] == "sess-42"
    assert later["mcp-protocol-version"] == "2025-06-18"
    assert later["authorization"] == f"Bearer {TOKEN}"


def test_a_peer_that_dies_mid_call_gives_transport_errors_not_a_hang():
    def behaviour(handler: BaseHTTPRequestHandler, body: bytes) -> None:
        handler.connection.close()  # the request was read; the answer never comes

    with peer(behaviour) as p:
        bridge = RawBridge(bridge_env(p.url))
        answer = bridge.call(7, "tools/call", {"name": "recall"})
        bridge.send({"jsonrpc": "2.0", "method": "notifications/cancelled"})
        assert bridge.close() == 0
    assert answer["error"]["code"] == -32000
    assert [line.get("id") for line in bridge.messages] == [7]


def test_a_peer_that_never_answers_times_out_into_an_error():
    release = threading.Event()

    def behaviour(handler: BaseHTTPRequestHandler, body: bytes) -> None:
        release.wait(WAIT)

    with peer(behaviour) as p:
        bridge = RawBridge(bridge_env(p.url, CPERSONA_PROXY_TIMEOUT_SECONDS="0.5"))
        answer = bridge.call(1, "tools/list")
        release.set()
        assert bridge.close() == 0
    assert answer["error"] == {
        "code": -32000,
        "message": "the cpersona server did not answer in time (" + p.url + ")",
    }


def test_a_refused_token_and_a_missing_server_are_errors_for_requests_only():
    def behaviour(handler: BaseHTTPRequestHandler, body: bytes) -> None:
        reply(handler, 401, "application/json", b'{"error": "unauthorized"}')

    with peer(behaviour) as p:
        bridge = RawBridge(bridge_env(p.url, token="wrong"))
        refused = bridge.call(1, "initialize")
        bridge.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        assert bridge.close() == 0
    assert refused["error"]["code"] == -32000
    assert "CPERSONA_AUTH_TOKEN" in refused["error"]["message"]
    assert len(bridge.messages) == 1

    bridge = RawBridge(bridge_env(p.url))  # the peer is closed now: nothing listens
    assert bridge.call(2, "tools/list")["error"]["code"] == -32000
    assert bridge.close() == 0


def test_a_line_that_is_not_json_gets_a_parse_error_and_the_bridge_goes_on():
    def behaviour(handler: BaseHTTPRequestHandler, body: bytes) -> None:
        reply(handler, 200, "application/json", echo_result(body, fine=True))

    with peer(behaviour) as p:
        bridge = RawBridge(bridge_env(p.url))
        bridge.send("{this is not json")
        assert bridge.call(3, "tools/list")["result"] == {"fine": True}
        assert bridge.close() == 0
    assert bridge.messages[0]["id"] is None
    assert bridge.messages[0]["error"]["code"] == -32700
    assert len(p.bodies) == 1  # the broken line was never sent on


def test_in_flight_requests_are_bounded_and_answered_before_exit_at_eof():
    release = threading.Event()

    def behaviour(handler: BaseHTTPRequestHandler, body: bytes) -> None:
        release.wait(WAIT)
        reply(handler, 200, "application/json", echo_result(body, done=True))

    with peer(behaviour) as p:
        bridge = RawBridge(bridge_env(p.url, CPERSONA_PROXY_MAX_INFLIGHT="2"))
        for i in range(6):
            bridge.send({"jsonrpc": "2.0", "id": i, "method": "tools/list"})
        assert bridge.proc.stdin is not None
        bridge.proc.stdin.close()  # EOF while requests are still in flight
        deadline = time.monotonic() + WAIT
        while p.active < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert bridge.proc.poll() is None  # it waits for what is in flight
        release.set()
        assert bridge.close() == 0
    assert sorted(line["id"] for line in bridge.messages) == list(range(6))
    assert all(line["result"] == {"done": True} for line in bridge.messages)
    assert p.most_active == 2


def test_a_url_that_cannot_be_requested_gives_errors_not_a_hang():
    # httpx2 refuses such a URL while building the request, before any transport error.
    bridge = RawBridge(bridge_env("http://[::1/mcp"))
    answer = bridge.call(1, "tools/list")
    bridge.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
    assert bridge.call(2, "tools/list")["error"]["code"] == -32000
    assert bridge.close() == 0
    assert answer["error"]["code"] == -32000
    assert "CPERSONA_REMOTE_URL" in answer["error"]["message"]
    assert [line["id"] for line in bridge.messages] == [1, 2]
    assert "Traceback" not in bridge.stderr


def test_sse_data_holding_unicode_line_separators_is_relayed_whole():
    # SSE ends lines at CR, LF or CRLF only; U+2028, U+0085 and U+001C are text inside JSON.
    text = "line\u2028separator, next\u0085line, file\u001cseparator"

    def behaviour(handler: BaseHTTPRequestHandler, body: bytes) -> None:
        request = json.loads(body)
        payload = json.dumps(
            {"jsonrpc": "2.0", "id": request["id"], "result": {"text": text}}, ensure_ascii=False
        ).encode()
        reply(
            handler, 200, "text/event-stream", b"event: message\r\ndata: " + payload + b"\r\n\r\n"
        )

    with peer(behaviour) as p:
        bridge = RawBridge(bridge_env(p.url))
        answer = bridge.call(1, "tools/call", {"name": "recall"})
        assert bridge.close() == 0
    assert answer["result"] == {"text": text}
