"""The remote vector service (`CPERSONA_VECTOR_SEARCH_MODE=remote`; surface.md §12.4,
retrieval.md §4.5), through the official MCP client against a fake service on loopback.

The fake serves the http embedding contract at `/embed` (hashing vectors) and records the
`/index`, `/search`, `/remove` and `/purge` calls at the base URL beside it. Writes send what
§12.4 says; recall takes the service's list as authoritative (no local scan, no query
embedding), and a service that is down or answers garbage changes nothing but the log: writes
are kept, recall runs its local scan.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest
from cpersona.config import Settings
from cpersona.embedding.hashing import HashingProvider
from cpersona.engine import Engine
from support.engine import FROM_SETTINGS
from support.local_http import LocalServer

Search = Callable[[dict[str, Any]], tuple[int, bytes]]


class Service:
    """The fake: an embedding endpoint and a vector service that records what it is told."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.search: Search = lambda body: (200, b'{"results": []}')
        self.writes_status = 200
        self._lock = threading.Lock()
        hashing = HashingProvider()
        service = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                path = self.path
                with service._lock:
                    service.calls.append((path, body))
                if path == "/v1/embed":
                    vectors = hashing.embed(body["texts"]).tolist()
                    status, out = 200, json.dumps({"embeddings": vectors}).encode()
                elif path == "/v1/search":
                    status, out = service.search(body)
                else:
                    status, out = service.writes_status, b""
                self.send_response(status)
                self.send_header("content-length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            def log_message(self, *args: object) -> None:
                pass

        self._server = LocalServer(Handler)
        self.url = f"{self._server.base}/v1/embed"

    def told(self, call: str) -> list[dict[str, Any]]:
        with self._lock:
            return [body for path, body in self.calls if path == f"/v1/{call}"]

    def forget(self) -> None:
        with self._lock:
            self.calls.clear()

    def close(self) -> None:
        self._server.close()


@pytest.fixture
def service() -> Iterator[Service]:
    svc = Service()
    yield svc
    svc.close()


# The vector service is a fake in this process, beside a SQLite database.
pytestmark = pytest.mark.runs_on(store_backend="sqlite")


@pytest.fixture
def engine_defaults(tmp_path: Path, service: Service) -> dict[str, Any]:
    return {
        "embedding_mode": "http",
        "embedding_url": service.url,
        "vector_search_mode": "remote",
        "recall_mode": "rsf",
        "export_dir": str(tmp_path),
        "embedder": FROM_SETTINGS,
    }


def stored(out: dict[str, Any]) -> int:
    assert out["result"] == "stored", out
    return out["id"]


@pytest.mark.anyio
async def test_writes_tell_the_service_what_surface_12_4_says(connect, service, tmp_path):
    async with connect() as tools:
        a = {"agent_id": "alice"}
        out = await tools("store", {**a, "message": {"content": "the boiler needs a service"}})
        first = stored(out)
        assert out["embedded"] is True
        assert service.told("index") == [
            {
                "namespace": "cpersona:alice",
                "items": [{"id": f"mem:{first}", "text": "the boiler needs a service"}],
            }
        ]
        service.forget()
        await tools("update_memory", {**a, "memory_id": first, "content": "boiler fixed"})
        episode = (await tools("archive_episode", {**a, "summary": "house chores"}))["episode_id"]
        await tools("delete_memory", {**a, "memory_id": first})
        await tools("delete_episode", {**a, "episode_id": episode})
        assert service.calls == [
            ("/v1/embed", {"texts": ["boiler fixed"]}),
            ("/v1/index", {"namespace": "cpersona:alice", "items": [
                {"id": f"mem:{first}", "text": "boiler fixed"}]}),
            ("/v1/embed", {"texts": ["house chores"]}),
            ("/v1/index", {"namespace": "cpersona:alice", "items": [
                {"id": f"ep:{episode}", "text": "house chores"}]}),
            ("/v1/remove", {"namespace": "cpersona:alice", "ids": [f"mem:{first}"]}),
            ("/v1/remove", {"namespace": "cpersona:alice", "ids": [f"ep:{episode}"]}),
        ]  # fmt: skip

        # import: every inserted row, at most 128 items per request, per agent
        lines = [
            json.dumps({"_type": "memory", "agent_id": "bob", "content": f"note number {i}"})
            for i in range(300)
        ]
        (tmp_path / "in.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
        service.forget()
        imported = await tools("import_memories", {"input_path": "in.jsonl"})
        assert imported["imported_memories"] == 300
        batches = service.told("index")
        assert [len(b["items"]) for b in batches] == [128, 128, 44]
        assert {b["namespace"] for b in batches} == {"cpersona:bob"}
        listed = await tools("list_memories", {"agent_id": "bob", "limit": 300})
        assert sorted(f"mem:{m['id']}" for m in listed["memories"]) == sorted(
            i["id"] for b in batches for i in b["items"]
        )

        # merge copy indexes the target's new rows; a move that empties the source purges it
        service.forget()
        await tools("store", {"agent_id": "carol", "message": {"content": "carol's own note"}})
        await tools("merge_memories", {"source_agent_id": "carol", "target_agent_id": "dave"})
        copied = service.told("index")[-1]
        dave = await tools("list_memories", {"agent_id": "dave"})
        assert copied == {
            "namespace": "cpersona:dave",
            "items": [{"id": f"mem:{dave['memories'][0]['id']}", "text": "carol's own note"}],
        }
        service.forget()
        moved = await tools(
            "merge_memories", {"source_agent_id": "dave", "target_agent_id": "erin", "mode": "move"}
        )
        assert moved["source_deleted"]["deleted_memories"] == 1
        assert service.told("purge") == [{"namespace": "cpersona:dave"}]
        assert service.told("index")[0]["namespace"] == "cpersona:erin"

        service.forget()
        await tools("delete_agent_data", {"agent_id": "bob"})
        assert service.told("purge") == [{"namespace": "cpersona:bob"}]


@pytest.mark.anyio
async def test_recall_takes_the_service_list_and_embeds_no_query(connect, service):
    async with connect() as tools:
        a = {"agent_id": "alice"}
        ids = [
            stored(await tools("store", {**a, "message": {"content": text}}))
            for text in ("apples are red", "the sky is blue", "grass is green")
        ]
        ep = (await tools("archive_episode", {**a, "summary": "a colour chat"}))["episode_id"]
        hits = [
            {"id": f"mem:{ids[2]}", "score": 0.91},
            {"id": "doc:7", "score": 0.9},  # an unknown kind: ignored
            {"id": "mem:99999", "score": 0.85},  # no such row: skipped
            {"id": f"ep:{ep}", "score": 0.5},
        ]
        service.search = lambda body: (200, json.dumps({"results": hits}).encode())
        service.forget()
        out = await tools("recall", {**a, "query": "qqzzy", "limit": 5})
        asked = service.told("search")
        assert asked == [
            {
                "namespace": "cpersona:alice",
                "query": "qqzzy",
                "limit": 5,
                "min_similarity": asked[0]["min_similarity"],
            }
        ]
        assert isinstance(asked[0]["min_similarity"], float)
        assert service.told("embed") == []  # the list is authoritative: no query embedding
        refs = [m["ref"] for m in out["messages"]]
        assert refs[-1] == f"mem:{ids[2]}"  # best last
        assert set(refs) <= {f"mem:{ids[2]}", f"ep:{ep}"}
        assert out["messages"][-1]["match_reason"]["cosine"] == pytest.approx(0.91)

        # An empty list is authoritative too: the identical text is found by FTS only.
        service.search = lambda body: (200, b'{"results": []}')
        out = await tools("recall", {**a, "query": "the sky is blue"})
        sky = [m for m in out["messages"] if m["ref"] == f"mem:{ids[1]}"]
        assert sky and "cosine" not in sky[0]["match_reason"]


@pytest.mark.parametrize(
    "answer",
    [
        (500, b'{"results": []}'),
        (200, b"not json"),
        (200, b'{"hits": []}'),
        (200, b'{"results": [{"id": 5}]}'),
        (200, b'{"results": "many"}'),
    ],
    ids=["http-500", "not-json", "no-results", "malformed-hit", "results-not-list"],
)
@pytest.mark.anyio
async def test_a_failing_search_falls_back_to_the_local_scan(connect, service, answer, caplog):
    async with connect() as tools:
        a = {"agent_id": "alice"}
        sky = stored(await tools("store", {**a, "message": {"content": "the sky is blue"}}))
        service.search = lambda body: answer
        with caplog.at_level(logging.WARNING, logger="cpersona.remote"):
            out = await tools("recall", {**a, "query": "the sky is blue"})
        row = [m for m in out["messages"] if m["ref"] == f"mem:{sky}"]
        assert row[0]["match_reason"]["cosine"] == pytest.approx(1.0, abs=1e-5)  # local scan
        assert "local scan" in caplog.text


@pytest.mark.anyio
async def test_a_service_that_refuses_writes_loses_nothing_local(connect, service):
    service.writes_status = 503
    async with connect() as tools:
        a = {"agent_id": "alice"}
        out = await tools("store", {**a, "message": {"content": "kept despite the service"}})
        assert (out["result"], out["embedded"]) == ("stored", False)
        deleted = await tools("delete_agent_data", a)
        assert deleted["deleted_memories"] == 1
    service.writes_status = 200


@pytest.mark.anyio
async def test_store_blob_false_keeps_no_local_memory_vector(connect, service):
    async with connect(store_blob=False) as tools:
        out = await tools("store", {"agent_id": "a", "message": {"content": "remote only"}})
        assert out["embedded"] is True  # the service has it
        assert service.told("embed") == []  # and nothing was embedded locally
        row = tools.engine.db.query("SELECT embedding FROM memories WHERE id = ?", (out["id"],))
        assert row[0][0] is None
        health = await tools("check_health", {"checks": ["vector_fallback_config"]})
        assert any(i["type"] == "no_local_vector_fallback" for i in health["issues"])


@pytest.mark.anyio
async def test_remote_mode_without_the_http_embedder_stays_local(tmp_path, caplog):
    settings = Settings(
        db_path=str(tmp_path / "m.db"), embedding_mode="hashing", vector_search_mode="remote"
    )
    with caplog.at_level(logging.WARNING, logger="cpersona.remote"):
        engine = Engine(settings, embedder=HashingProvider())
    try:
        assert engine.remote is None
        assert "CPERSONA_EMBEDDING_MODE=http" in caplog.text
    finally:
        engine.close()


@pytest.mark.anyio
async def test_a_credentials_fix_tells_the_service_the_redacted_text(connect, service):
    """check_health(fix=true) redacts rows written under CPERSONA_SECRETS=allow; the service
    keeps its own copy of each text, so it is told the redacted one (issue 22)."""
    token = "ghp_" + "Rm4" * 12
    a = {"agent_id": "alice"}
    async with connect(secrets="allow") as tools:
        kept = stored(await tools("store", {**a, "message": {"content": f"ci uses {token}"}}))
        episode = (await tools("archive_episode", {**a, "summary": f"rotated {token}"}))[
            "episode_id"
        ]
        assert service.told("index")[0]["items"][0]["text"] == f"ci uses {token}"
    service.forget()
    async with connect() as tools:
        fixed = await tools("check_health", {"checks": ["stored_credentials"], "fix": True})
        assert fixed["status"] == "healthy"
    assert service.told("index") == [
        {
            "namespace": "cpersona:alice",
            "items": [{"id": f"mem:{kept}", "text": "ci uses [REDACTED:github_token]"}],
        },
        {
            "namespace": "cpersona:alice",
            "items": [{"id": f"ep:{episode}", "text": "rotated [REDACTED:github_token]"}],
        },
    ]
    assert token not in json.dumps(service.calls)
