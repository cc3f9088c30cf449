"""CPERSONA_SECRETS on a real HTTP server (issue 22): the banner says the policy, an invalid
value stops start-up with one line, and `reject` refuses a store that holds a token."""

from __future__ import annotations

import pytest
from support.http_server import HttpServer, connect

TOKEN = "glpat-" + "x7Rt2" * 5


def test_http_an_invalid_secrets_value_stops_start_up(tmp_path):
    srv = HttpServer(tmp_path, {"CPERSONA_SECRETS": "sometimes"})
    srv.launch()
    assert srv.wait_exit() == 2
    (line,) = srv.stderr.splitlines()
    assert "CPERSONA_SECRETS='sometimes' is not valid" in line
    assert "redact, reject, allow" in line and not srv.db.exists()


@pytest.mark.anyio
async def test_http_banner_says_the_policy_and_reject_refuses(tmp_path):
    srv = HttpServer(
        tmp_path, {"CPERSONA_ALLOW_UNAUTHENTICATED_HTTP": "true", "CPERSONA_SECRETS": "reject"}
    )
    srv.start()
    try:
        assert "credentials: writes that hold them are refused (CPERSONA_SECRETS=reject)" in (
            srv.stderr
        )
        async with connect(srv.url, None) as tools:
            out = await tools(
                "store", {"agent_id": "a", "message": {"content": f"ci token {TOKEN}"}}
            )
            assert out["result"] == "rejected" and "gitlab_token" in out["reason"]
            assert TOKEN not in out["reason"]
            assert (await tools("list_memories", {"agent_id": "a"}))["memories"] == []
    finally:
        assert srv.stop() == 0
    assert TOKEN not in srv.stderr
