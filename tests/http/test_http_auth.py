"""Authentication and the request body budget of the streamable-HTTP transport, through a real
server process and the official MCP client (surface.md §11.1-11.2).

(a) no token, a wrong token and a token with the wrong scheme are refused with 401 and the
documented body; the right token works on both protocol eras and at any path; (b) start-up is
refused without any authentication (one line, non-zero exit, no database file), and the explicit
opt-out serves with a warning; (c) a body over the budget is refused with 413 in reject mode and
nothing is stored, while warn mode serves it and logs.
"""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest
from mcp.shared.exceptions import MCPError
from support.http_server import HttpServer, connect, initialize_body, post

TOKEN = "test-token-s3cret"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    with HttpServer(tmp_path_factory.mktemp("auth"), {"CPERSONA_AUTH_TOKEN": TOKEN}) as srv:
        yield srv


def memory_count(db: Path) -> int:
    with closing(sqlite3.connect(db)) as conn:
        return conn.execute("SELECT count(*) FROM memories").fetchone()[0]


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Bearer wrong"},
        {"Authorization": f"Basic {TOKEN}"},
        {"Authorization": "Bearer"},
        {"Authorization": f"Bearer {TOKEN}x"},
        {"Authorization": f"Bearer {TOKEN[:-1]}"},
    ],
    ids=["none", "wrong", "basic-scheme", "empty", "longer", "prefix"],
)
def test_http_auth_refuses_without_the_token(server, headers):
    response = post(server.url, initialize_body(), headers)
    assert response.status_code == 401
    assert response.json() == {"error": "unauthorized"}
    assert response.headers["www-authenticate"] == "Bearer"


def leaves(error: BaseException) -> list[BaseException]:
    """The innermost exceptions of an (exception group) tree: the SDK's task groups wrap them."""
    if isinstance(error, BaseExceptionGroup):
        return [leaf for sub in error.exceptions for leaf in leaves(sub)]
    return [error]


@pytest.mark.anyio
@pytest.mark.parametrize("token", [None, "wrong-token"], ids=["none", "wrong"])
async def test_http_auth_client_without_token_cannot_connect(server, token):
    # The official client turns the server's 401 into an MCPError answer to `initialize` (its
    # stand-in for any non-2xx without a JSON-RPC body); a server that is not listening would
    # fail with a connection error instead, and a served call would not fail at all.
    with pytest.raises(BaseExceptionGroup) as refused:
        async with connect(server.url, token) as tools:
            await tools("list_memories", {"agent_id": "a"})
    errors = leaves(refused.value)
    assert [type(e) for e in errors] == [MCPError], errors
    assert errors[0].message == "Server returned an error response"
    assert response_status(server, token) == 401


def response_status(server: HttpServer, token: str | None) -> int:
    headers = {} if token is None else {"Authorization": f"Bearer {token}"}
    return post(server.url, initialize_body(), headers).status_code


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_http_auth_right_token_serves_tools(server, mode):
    async with connect(server.url, TOKEN, mode=mode) as tools:
        listed = await tools.client.list_tools()
        assert "store" in {tool.name for tool in listed.tools}
        stored = await tools(
            "store",
            {"agent_id": f"auth-{mode}", "message": {"content": f"the token works ({mode})"}},
        )
        assert stored["ok"] is True and stored["result"] == "stored"
        listing = await tools("list_memories", {"agent_id": f"auth-{mode}"})
        assert [m["content"] for m in listing["memories"]] == [f"the token works ({mode})"]


def test_http_auth_scheme_word_is_case_insensitive_and_any_path_serves(server):
    root = server.url.removesuffix("/mcp") + "/"
    for url in (server.url, root, root + "some/other/path"):
        response = post(url, initialize_body(), {"Authorization": f"bEaReR {TOKEN}"})
        assert response.status_code == 200, (url, response.text)
        assert "cloto-mcp-cpersona" in response.text


def test_http_auth_cors_preflight_needs_no_token(server):
    import httpx2

    response = httpx2.options(server.url, headers={
        "Origin": "https://claude.ai", "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization, content-type",
    }, timeout=30)  # fmt: skip
    assert response.status_code == 200
    assert response.headers["access-control-allow-origin"] == "https://claude.ai"


def test_http_auth_non_ascii_token_compares_utf8_bytes(tmp_path):
    token = "t\u00f6ken-\u65e5\u672c"
    srv = HttpServer(tmp_path, {"CPERSONA_AUTH_TOKEN": token})
    srv.start()
    try:
        good = post(srv.url, initialize_body(), {"Authorization": b"Bearer " + token.encode()})  # type: ignore[dict-item]
        assert good.status_code == 200, good.text
        bad = post(srv.url, initialize_body(), {"Authorization": b"Bearer t\xf6ken"})  # type: ignore[dict-item]
        assert bad.status_code == 401
    finally:
        assert srv.stop() == 0


def test_http_auth_start_refused_without_token(tmp_path):
    srv = HttpServer(tmp_path)
    srv.launch()
    assert srv.wait_exit() == 2
    lines = srv.stderr.splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("cpersona: refusing to serve streamable-http without authentication")
    assert "CPERSONA_AUTH_TOKEN" in lines[0] and "CPERSONA_ALLOW_UNAUTHENTICATED_HTTP" in lines[0]
    assert not srv.db.exists()  # refused before the database was opened


def test_http_auth_empty_token_is_no_token(tmp_path):
    srv = HttpServer(tmp_path, {"CPERSONA_AUTH_TOKEN": ""})
    srv.launch()
    assert srv.wait_exit() == 2
    assert len(srv.stderr.splitlines()) == 1 and not srv.db.exists()


@pytest.mark.anyio
async def test_http_auth_opt_out_serves_unauthenticated_with_a_warning(tmp_path):
    srv = HttpServer(tmp_path, {"CPERSONA_ALLOW_UNAUTHENTICATED_HTTP": "TRUE"})
    srv.start()
    try:
        assert "auth: NONE" in srv.stderr and "WITHOUT authentication" in srv.stderr
        async with connect(srv.url, None) as tools:
            listing = await tools("list_memories", {"agent_id": "x"})
            assert listing["memories"] == []
        forwarded = post(srv.url, initialize_body(), {"X-Forwarded-For": "203.0.113.9"})
        assert forwarded.status_code == 200
    finally:
        assert srv.stop() == 0
    assert srv.stderr.count("forwarding header") == 1


def test_http_budget_reject_mode_answers_413_and_stores_nothing(tmp_path):
    srv = HttpServer(tmp_path, {
        "CPERSONA_AUTH_TOKEN": TOKEN, "CPERSONA_HTTP_MAX_BODY_BYTES": "4096",
        "CPERSONA_HTTP_BODY_LIMIT_MODE": "reject",
    })  # fmt: skip
    srv.start()
    auth = {"Authorization": f"Bearer {TOKEN}"}

    def store_call(content: str) -> bytes:
        return json.dumps({
            "jsonrpc": "2.0", "id": 7, "method": "tools/call",
            "params": {"name": "store",
                       "arguments": {"agent_id": "big", "message": {"content": content}}},
        }).encode()  # fmt: skip

    try:
        big = store_call("x" * 5000)
        assert len(big) > 4096
        refused = post(srv.url, big, auth)
        assert refused.status_code == 413
        assert refused.json() == {"error": "payload_too_large", "max_bytes": 4096}
        small = post(
            srv.url, store_call("small enough"), {**auth, "mcp-protocol-version": "2025-06-18"}
        )
        assert small.status_code == 200, small.text
        assert '\\"result\\": \\"stored\\"' in small.text
    finally:
        assert srv.stop() == 0
    assert memory_count(srv.db) == 1  # only the small one
    assert "Traceback" not in srv.stderr


def test_http_budget_warn_mode_serves_and_logs(tmp_path):
    srv = HttpServer(
        tmp_path, {"CPERSONA_AUTH_TOKEN": TOKEN, "CPERSONA_HTTP_MAX_BODY_BYTES": "1024"}
    )
    srv.start()
    try:
        body = json.dumps({
            "jsonrpc": "2.0", "id": 3, "method": "tools/call",
            "params": {"name": "store",
                       "arguments": {"agent_id": "w", "message": {"content": "y" * 3000}}},
        }).encode()  # fmt: skip
        for _ in range(2):
            served = post(
                srv.url,
                body,
                {"Authorization": f"Bearer {TOKEN}", "mcp-protocol-version": "2025-06-18"},
            )
            assert served.status_code == 200, served.text
    finally:
        assert srv.stop() == 0
    assert srv.stderr.count("CPERSONA_HTTP_MAX_BODY_BYTES=1024") == 1  # the 1st, not the 2nd
    assert memory_count(srv.db) == 1  # the second is a duplicate (skipped), never refused


def test_http_auth_loopback_bind_refuses_foreign_host_and_origin(server):
    auth = {"Authorization": f"Bearer {TOKEN}"}
    rebound = post(server.url, initialize_body(), {**auth, "Host": "attacker.example:80"})
    assert rebound.status_code == 421
    foreign = post(server.url, initialize_body(), {**auth, "Origin": "https://attacker.example"})
    assert foreign.status_code == 403
    claude = post(server.url, initialize_body(), {**auth, "Origin": "https://claude.ai"})
    assert claude.status_code == 200
    assert claude.headers["access-control-allow-origin"] == "https://claude.ai"


def test_http_busy_port_stops_with_one_line(tmp_path):
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        srv = HttpServer(tmp_path, {"CPERSONA_AUTH_TOKEN": TOKEN, "CPERSONA_HTTP_PORT": str(port)})
        srv.launch()
        assert srv.wait_exit() == 1
    lines = srv.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"cpersona: cannot listen on 127.0.0.1:{port}")
    assert not srv.db.exists()
