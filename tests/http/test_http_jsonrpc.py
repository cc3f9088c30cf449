"""Raw POST bodies to a real HTTP server: every malformed JSON-RPC request is answered with the
right error code and, when it has a valid one, its own id (not the SDK's `"id": null` and a
pydantic dump), and the server keeps serving a valid client afterwards."""

from __future__ import annotations

import json
from typing import Any

import pytest
from support.http_server import HttpServer, connect, post
from support.jsonrpc import deep_json, store_with_metadata

TOKEN = "jsonrpc-test-token"
HEADERS = {"Authorization": f"Bearer {TOKEN}", "mcp-protocol-version": "2025-06-18"}


MALFORMED: list[tuple[str | bytes, int, Any]] = [
    ('{"jsonrpc":"2.0","id":2,"method":"tools/call","params":"store"}', -32602, 2),
    ('{"jsonrpc":"2.0","id":"s3","method":"tools/call","params":["store",{}]}', -32602, "s3"),
    (store_with_metadata(4, deep_json(200)), -32602, 4),
    (store_with_metadata(5, deep_json(50_000)), -32602, 5),
    ('{"jsonrpc":"2.0","id":6}', -32600, 6),
    ('{"jsonrpc":"1.0","id":7,"method":"tools/list"}', -32600, 7),
    ('{"jsonrpc":"2.0","id":1.5,"method":"ping"}', -32600, None),
    ('[{"jsonrpc":"2.0","id":8,"method":"ping"}]', -32600, None),
    ("not json", -32700, None),
    (b"\xff\xfe", -32700, None),
]


@pytest.fixture
def server(tmp_path):
    srv = HttpServer(tmp_path, {"CPERSONA_AUTH_TOKEN": TOKEN})
    srv.start()
    yield srv
    srv.stop()


@pytest.mark.anyio
async def test_every_malformed_post_is_answered_with_its_id(server):
    for body, code, request_id in MALFORMED:
        raw = body.encode() if isinstance(body, str) else body
        answer = post(server.url, raw, HEADERS)
        assert answer.status_code == 400, (body[:80], answer.text[:200])
        message = answer.json()
        assert message["jsonrpc"] == "2.0"
        assert message["id"] == request_id, (body[:80], message)
        assert message["error"]["code"] == code, (body[:80], message)
        assert "validation error" not in message["error"]["message"].lower()
    # A malformed notification is refused too (HTTP answers every POST), without an id.
    note = post(server.url, b'{"jsonrpc":"2.0","method":"notifications/x","params":1}', HEADERS)
    assert note.status_code == 400 and note.json()["id"] is None
    # Nesting within the parser's reach is served, and so is everything after.
    within = post(server.url, store_with_metadata(9, deep_json(190)).encode(), HEADERS)
    assert within.status_code == 200 and '"id":9' in within.text and '"result"' in within.text
    async with connect(server.url, TOKEN) as tools:
        out = await tools("store", {"agent_id": "a", "message": {"content": "after"}})
        assert out["result"] == "stored"
        listed = await tools("list_memories", {"agent_id": "a"})
        assert sorted(m["content"] for m in listed["memories"]) == ["after", "deep 9"]
    assert "Traceback" not in server.stderr


def test_an_unauthenticated_malformed_body_is_refused_by_authentication_first(server):
    answer = post(server.url, b'{"jsonrpc":"2.0","id":2,"method":"tools/call","params":"x"}')
    assert answer.status_code == 401
    assert json.loads(answer.text) == {"error": "unauthorized"}
