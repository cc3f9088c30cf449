"""`GET /metrics` of a real HTTP server process after a scripted session through the official
MCP client (issue 14): the text parses with prometheus_client's own parser, the per-tool counts
equal the calls made, every recall stage that ran has observations, the scrape-time gauges read
the database, and the scrape is refused without the token unless CPERSONA_METRICS_PUBLIC=true.
"""

from __future__ import annotations

import json
from typing import Any

import httpx2
import pytest
from prometheus_client.parser import text_string_to_metric_families
from support.http_server import WAIT, HttpServer, connect

TOKEN = "metrics-token-s3cret"
RECALL_STAGES = (
    "query_embedding", "vector_scan", "hydration", "full_text", "keyword", "fusion", "scoring",
    "gate",
)  # fmt: skip


def metrics_url(server: HttpServer) -> str:
    return server.url.removesuffix("/mcp") + "/metrics"


def scrape(server: HttpServer, token: str | None = TOKEN) -> httpx2.Response:
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    return httpx2.get(metrics_url(server), headers=headers, timeout=WAIT)


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of the scrape keyed by (name, sorted labels)."""
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def value(found: dict[Any, float], name: str, **labels: str) -> float:
    return found[(name, tuple(sorted(labels.items())))]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    with HttpServer(tmp_path_factory.mktemp("metrics"), {"CPERSONA_AUTH_TOKEN": TOKEN}) as srv:
        yield srv


@pytest.mark.anyio
async def test_metrics_count_a_scripted_session(server):
    async with connect(server.url, TOKEN) as tools:
        for i, text in enumerate(("tea with lemon", "green tea in Kyoto", "the old city map")):
            message = {"id": f"m{i}", "content": text}
            stored = await tools("store", {"agent_id": "a", "message": message})
            assert stored["result"] == "stored"
        for query in ("tea", "old city map"):
            assert (await tools("recall", {"agent_id": "a", "query": query}))["messages"]
        await tools("list_memories", {"agent_id": "a"})
        await tools("pause_persistence", {"session_key": "s1", "ttl_seconds": 600})
        invalid = await tools.raw("store", {"agent_id": "a"})  # message is required
        assert invalid.is_error
        unknown = await tools.raw("no_such_tool", {})
        assert "Unknown tool" in unknown.content[0].text
        refused = await tools("delete_memory", {"agent_id": "a", "memory_id": 999999})
        assert refused["ok"] is False

    response = scrape(server)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    found = samples(response.text)

    made = {"store": 4, "recall": 2, "list_memories": 1, "pause_persistence": 1}
    made |= {"delete_memory": 1, "unknown": 1, "get_profile": 0}
    for tool, calls in made.items():
        assert value(found, "cpersona_tool_calls_total", tool=tool) == calls, tool
        if calls:
            assert value(found, "cpersona_tool_duration_seconds_count", tool=tool) == calls
            assert value(found, "cpersona_tool_duration_seconds_bucket", tool=tool, le="+Inf") == (
                calls
            )
    assert value(found, "cpersona_tool_errors_total", tool="store", kind="invalid_arguments") == 1
    assert value(found, "cpersona_tool_errors_total", tool="unknown", kind="unknown_tool") == 1
    assert value(found, "cpersona_tool_errors_total", tool="delete_memory", kind="refused") == 1
    assert ("cpersona_tool_errors_total", (("kind", "refused"), ("tool", "recall"))) not in found

    # rsf (the default mode) runs every stage once per recall that finds rows.
    for stage in RECALL_STAGES:
        assert value(found, "cpersona_recall_stage_duration_seconds_count", stage=stage) == 2, stage

    assert value(found, "cpersona_table_rows", table="memories") == 3
    assert value(found, "cpersona_table_rows", table="episodes") == 0
    assert value(found, "cpersona_paused_sessions") == 1
    assert value(found, "cpersona_embedding_model_loaded") == 1
    assert value(found, "cpersona_vector_index_lag_entries", table="memories") == 0
    assert value(found, "cpersona_vector_index_file_bytes", table="memories") > 0


def test_metrics_labels_never_carry_agent_ids_or_queries(server):
    text = scrape(server).text
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            for label in sample.labels.values():
                assert label not in ("a", "tea", "old city map", "no_such_tool", "s1")


@pytest.mark.parametrize("token", [None, "wrong"], ids=["none", "wrong"])
def test_metrics_refused_without_the_token(server, token):
    response = scrape(server, token)
    assert response.status_code == 401
    assert "cpersona_tool_calls_total" not in response.text


def test_metrics_public_scrape_needs_no_token_but_mcp_still_does(tmp_path):
    env = {"CPERSONA_AUTH_TOKEN": TOKEN, "CPERSONA_METRICS_PUBLIC": "true"}
    srv = HttpServer(tmp_path, env)
    srv.start()
    try:
        response = scrape(srv, None)
        assert response.status_code == 200
        found = samples(response.text)
        assert value(found, "cpersona_tool_calls_total", tool="store") == 0
        mcp = httpx2.post(srv.url, content=b"{}", timeout=WAIT)
        assert mcp.status_code == 401
    finally:
        assert srv.stop() == 0, srv.stderr


def test_metrics_in_acl_mode_answer_any_listed_client_only(tmp_path):
    clients = [
        {"client_id": "reader", "token": "reader-token-123", "grants": {"alpha": "read"}},
        {"client_id": "nobody", "token": "nobody-token-456", "grants": {"*": "none"}},
    ]
    acl = tmp_path / "acl.json"
    acl.write_text(json.dumps({"clients": clients}), encoding="utf-8")
    srv = HttpServer(tmp_path, {"CPERSONA_ACL_FILE": str(acl)})
    srv.start()
    try:
        for client in clients:
            assert scrape(srv, client["token"]).status_code == 200
        assert scrape(srv, "not-a-client-token").status_code == 401
        assert scrape(srv, None).status_code == 401
    finally:
        assert srv.stop() == 0, srv.stderr
