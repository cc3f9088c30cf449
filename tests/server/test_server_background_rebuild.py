"""No recall waits for a rebuild of the index files (issue 20 item 2), through a real MCP client.

A server opens a database whose index files are gone (a migration, a restore): its first
recalls answer at once with the rows, order and scores recall gives once the files are
rebuilt (from the chunked BLOB scan and FTS5 meanwhile), while the rebuilds are held half way
in the background; check_health says how far the vector rebuild is. On PostgreSQL the
full-text index has no FTS5 to stand in for it, so it is rebuilt inside the call, as before,
with the same answers; the vector file is rebuilt in the background while pgvector answers
(the same rows, scores within float32 rounding), and then the file answers exactly again.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import cpersona.derived.healing as healing
import cpersona.fts.rebuild as fts_rebuild
import cpersona.vectors.index as vector_index
import pytest
from support.gate import Gate
from test_server_index_damage import content, store_rows

pytestmark = pytest.mark.anyio

QUERIES = ["quartz7 meadow3", content(4), "river11", "entry2 concerns"]


async def answers(tools: Any) -> list[Any]:
    return [
        (await tools("recall", {"agent_id": "a", "query": q, "limit": 5}))["messages"]
        for q in QUERIES
    ]


def close_to(got: list[Any], want: list[Any]) -> bool:
    """The same rows for each query, each row's cosine within 1e-5 (pgvector sums a dot
    product in another order than the Rust core: docs/compatibility.md); rows whose scores
    are that close may trade places, so the order is not compared."""
    for rows, expected in zip(got, want, strict=True):
        scores = {m["ref"]: m["match_reason"].get("cosine") for m in expected}
        if {m["ref"] for m in rows} != set(scores):
            return False
        for m in rows:
            cosine, other = m["match_reason"].get("cosine"), scores[m["ref"]]
            if (cosine is None) != (other is None):
                return False
            if cosine is not None and abs(cosine - other) > 1e-5:
                return False
    return True


async def test_recall_during_the_rebuild_answers_at_once_with_the_same_rows(
    connect: Callable[..., Any], store_backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with connect() as tools:
        await store_rows(tools)
        after_rebuild = await answers(tools)
        files = [tools.engine.fts["memories"].path]
        files += [index.path for index in tools.engine.indexes.values()]
    for path in files:
        path.unlink(missing_ok=True)
    monkeypatch.setattr(healing, "INLINE_ROWS", 0)
    monkeypatch.setattr(healing, "STEP_ROWS", 1)
    vectors = Gate(monkeypatch, vector_index, "append_row")
    fulltext = Gate(monkeypatch, fts_rebuild, "put_record")
    if store_backend == "postgresql":
        fulltext.go.set()  # rebuilt inside the first recall: nothing to hold it for
    try:
        async with connect() as tools:
            during = await answers(tools)
            if store_backend == "sqlite":
                assert during == after_rebuild
            else:  # pgvector answers meanwhile: its sums may differ in the last float32 bits
                assert close_to(during, after_rebuild)
            fts = tools.engine.fts["memories"]
            if store_backend == "sqlite":
                index = tools.engine.indexes["memories"]
                assert vectors.held.wait(60) and fulltext.held.wait(60)
                assert index.healing and fts.healing  # held: the recalls did not wait
                assert await answers(tools) == after_rebuild
                report = await tools("check_health", {"checks": ["vector_index"]})
                rebuilding = [i for i in report["issues"] if i["check"] == "vector_index"]
                assert [(i["type"], i["table"], i["done"]) for i in rebuilding] == [
                    ("vector_index_rebuilding", "memories", 2)
                ], rebuilding
                vectors.go.set()
                fulltext.go.set()
                index.wait_for_healing(60)
                assert index.verify() == []
            else:
                index = tools.engine.indexes["memories"]
                assert vectors.held.wait(60) and index.healing  # the recalls did not wait
                assert not fts.healing and fts.status().usable
                vectors.go.set()
                index.wait_for_healing(60)
                assert index.verify() == []
            fts.wait_for_healing(60)
            assert fts.verify() == []
            assert await answers(tools) == after_rebuild
            assert all(Path(p).exists() for p in files)
    finally:
        vectors.go.set()
        fulltext.go.set()
