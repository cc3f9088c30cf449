"""The vector arm through a real MCP client, on SQLite and on PostgreSQL (issue 12 item 4).

A memory that shares no word (and no trigram) with the query is found only by its vector; a
row of the same meaning outside the caller's scope (another agent, another project, another
channel, another source, or past the window) is never returned.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from cpersona.config import Settings
from cpersona.embedding.base import BatchEmbedder
from cpersona.engine import Engine
from cpersona.server.app import build_server
from mcp import Client

pytestmark = pytest.mark.anyio

DIM = 8
#: Texts mentioning one of these words embed near that concept's axis; nothing else is shared.
CONCEPTS = {0: ("kitten", "feline"), 1: ("invoice", "billing")}


class ConceptEmbedder(BatchEmbedder):
    """A stand-in model that knows two paraphrases: kitten ~ feline, invoice ~ billing."""

    name = "concepts:8"

    def dim(self) -> int:
        return DIM

    def _embed_batch(self, batch: list[str], kind: str) -> np.ndarray:
        out = np.zeros((len(batch), DIM), dtype=np.float32)
        for row, text in enumerate(batch):
            words = text.lower().split()
            out[row, 7] = 0.2
            for axis, names in CONCEPTS.items():
                if any(w.strip(".,?") in names for w in words):
                    out[row, axis] = 1.0
            out[row] /= np.linalg.norm(out[row])
        return out


async def _call(client: Client, name: str, args: dict[str, Any]) -> dict[str, Any]:
    result = await client.call_tool(name, args)
    assert not result.is_error, result.content[0].text
    return json.loads(result.content[0].text)


async def _store(client: Client, content: str, agent: str = "alice", **extra: Any) -> int:
    source = extra.pop("source", None)
    message: dict[str, Any] = {"content": content}
    if source is not None:
        message["source"] = source
    out = await _call(client, "store", {"agent_id": agent, "message": message, **extra})
    assert out["result"] == "stored", out
    return int(out["id"])


async def test_a_paraphrase_is_found_by_its_vector_only_within_scope(
    tmp_path: Path, database_url_for: Callable[[str], str | None]
) -> None:
    db_path = str(tmp_path / "mem.db")
    settings = Settings(
        db_path=db_path,
        embedding_mode="hashing",
        database_url=database_url_for(db_path),
        recall_mode="rrf",
        max_memories=7,
    )
    engine = Engine(settings, embedder=ConceptEmbedder())
    try:
        async with Client(build_server(engine), raise_exceptions=True) as client:
            old = await _store(client, "An old kitten story from before the window.")
            await _store(client, "The kitten of another agent.", agent="bob")
            office = await _store(client, "A kitten filed at the office.", project_id="office")
            await _store(client, "A kitten heard on the radio channel.", channel="radio")
            await _store(
                client, "A kitten reported by mail.", source={"type": "User", "id": "mail:7"}
            )
            target = await _store(
                client,
                "Our kitten Tama naps on the warm laptop all afternoon.",
                project_id="home",
                channel="chat",
                source={"type": "User", "id": "discord:7"},
            )
            for n in range(3):  # newer rows of another meaning: `old` is the 8th newest
                await _store(client, f"The March invoice number {n} is overdue.")

            async def found(**kw: Any) -> list[dict[str, Any]]:
                out = await _call(
                    client,
                    "recall",
                    {"agent_id": "alice", "query": "feline companion", "limit": 10, **kw},
                )
                return out["messages"]

            rows = await found(project_id="home", channel="chat", source_id="discord:")
            assert [m["ref"] for m in rows] == [f"mem:{target}"]
            assert rows[0]["match_reason"]["cosine"] > 0.9  # the vector arm, not a word match

            unscoped = await found()
            refs = {m["ref"] for m in unscoped}
            assert len(unscoped) == 4 and f"mem:{target}" in refs
            assert f"mem:{old}" not in refs  # past the 7-row window
            assert "The kitten of another agent." not in {m["content"] for m in unscoped}
            office_rows = {m["ref"] for m in await found(project_id="office")}
            assert f"mem:{office}" in office_rows and f"mem:{target}" not in office_rows
    finally:
        engine.close()
