"""Damaged index files never change an answer (issue 21 item 4), through a real MCP client.

The bytes of the vector body are overwritten in place while the server holds the file mapped
(another row's vector, or random bytes), or the text of full-text records is overwritten
before a server loads them: every exact-content recall still ranks its own row first at
cosine 1 (the database's vector, not the damaged one), a word that exists only in the
damaged bytes finds nothing, and the file is rebuilt in the background to agree with the
database again. (On PostgreSQL, which has no FTS5, the keyword arm falls back to LIKE while
the full-text file is rebuilt, as it does whenever that file cannot answer.)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from cpersona.vectors.format import Layout
from cpersona.vectors.index import VectorIndex

pytestmark = pytest.mark.anyio

ROWS = 20


def content(i: int) -> str:
    # Distinct words per row: the hashing embedder gives each its own direction.
    return f"entry{i} concerns quartz{i} and meadow{i} near river{i}"


async def store_rows(tools: Any) -> list[int]:
    ids = []
    for i in range(ROWS):
        out = await tools("store", {"agent_id": "a", "message": {"content": content(i)}})
        assert out["result"] == "stored", out
        ids.append(int(out["id"]))
    return ids


async def best(tools: Any, query: str) -> dict[str, Any]:
    out = await tools("recall", {"agent_id": "a", "query": query, "limit": 5})
    assert out["messages"], out
    return max(out["messages"], key=lambda m: m["match_reason"]["score"])


async def assert_every_row_first(tools: Any, ids: list[int]) -> None:
    for i, row_id in enumerate(ids):
        top = await best(tools, content(i))
        assert top["ref"] == f"mem:{row_id}", (i, top)
        assert top["match_reason"].get("cosine", 0.0) > 0.999, (i, top)


def overwrite_vectors(index: VectorIndex, how: str) -> None:
    """Overwrite the vector body of four slots in place, as a stray write would."""
    with open(index.path, "rb") as f:
        head = f.read(128)
    dim = int.from_bytes(head[12:16], "little")
    capacity = int.from_bytes(head[24:32], "little")
    start = Layout.of(dim, capacity).offsets["vectors"]
    width = dim * 4
    rng = np.random.default_rng(7)
    with open(index.path, "r+b") as f:
        for slot in (2, 5, 11, 17):
            if how == "another-row":
                f.seek(start + (slot + 1) * width)
                data = f.read(width)
            else:  # random bytes over the middle of the vector
                data = rng.integers(0, 256, width // 2, dtype=np.uint8).tobytes()
            f.seek(start + slot * width + (0 if how == "another-row" else width // 4))
            f.write(data)


@pytest.mark.parametrize("store_backend", ["sqlite"])  # PostgreSQL scans in the database: no file
@pytest.mark.parametrize("how", ["another-row", "random-bytes"])
async def test_vector_body_overwritten_in_place_never_changes_an_answer(
    connect: Callable[..., Any], how: str
) -> None:
    async with connect() as tools:
        ids = await store_rows(tools)
        await assert_every_row_first(tools, ids)  # the server now holds the file mapped
        index = tools.engine.indexes["memories"]
        overwrite_vectors(index, how)
        # Until the rebuild completes, the database's vectors answer.
        await assert_every_row_first(tools, ids)
        index.wait_for_healing(timeout=60)
        assert index.verify() == []
        await assert_every_row_first(tools, ids)  # and the rebuilt file answers the same


async def test_fulltext_records_overwritten_never_change_an_answer(
    connect: Callable[..., Any], store_backend: str
) -> None:
    queries = ["quartz7 meadow3", "zircon7 meadow3", content(7), "quartz7"]

    async def answers(tools: Any) -> list[Any]:
        return [
            (await tools("recall", {"agent_id": "a", "query": q, "limit": 5}))["messages"]
            for q in queries
        ]

    async with connect() as tools:
        ids = await store_rows(tools)
        before = await answers(tools)
        path = tools.engine.fts["memories"].path
    # Both arms rank row 7 first for its own word (the fused score says so): an arm that lost
    # the word would show.
    assert {m["ref"] for m in before[0]} == {f"mem:{ids[7]}", f"mem:{ids[3]}"}, before[0]
    data = path.read_bytes()
    with open(path, "r+b") as f:  # same length: the records still parse
        f.seek(data.index(b"quartz7"))
        f.write(b"zircon7")
    async with connect() as tools:  # a server that loads the damaged file
        during = await answers(tools)
        if store_backend == "sqlite":  # FTS5 answers while the file is rebuilt: the same rows
            assert during == before
        else:  # no FTS5: the keyword arm falls back to LIKE, never to the damaged text
            for got, want in zip(during, before, strict=True):
                assert {m["ref"] for m in got} <= {m["ref"] for m in want}, (got, want)
        fts = tools.engine.fts["memories"]
        fts.wait_for_healing(timeout=60)
        assert fts.verify() == []
        assert await answers(tools) == before
        await assert_every_row_first(tools, ids)
