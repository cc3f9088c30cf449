"""Each table's vectors stay one model's: queries and writes go to the model that made them.

Hashing models of different widths stand in for different language models (fast and
deterministic); tests/admin/test_model_switch.py does the same with MiniLM and e5 processes.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import closing, contextmanager
from typing import Any

import numpy as np
import pytest
from cpersona.config import Settings
from cpersona.embedding.hashing import HashingProvider
from cpersona.storage import Database, open_database
from cpersona.storage.db import embedding_param

pytestmark = pytest.mark.anyio

QUERY = "rollout strategy for kubernetes clusters"
DOC = "kubernetes rollout strategy notes"


@contextmanager
def database(settings: Settings) -> Iterator[Database]:
    """The engine's database opened on its own (another process's view), either backend."""
    with closing(
        open_database(settings.db_path, database_url=settings.database_url, pool_size=2)
    ) as db:
        yield db


def widths(settings: Settings, table: str = "memories") -> set[int | None]:
    with database(settings) as db:
        rows = db.query(f"SELECT {db.ops.byte_length('embedding')} FROM {table}")
    return {None if r[0] is None else r[0] // 4 for r in rows}


def recorded(settings: Settings) -> dict[str, str]:
    with database(settings) as db:
        return {r[0]: r[1] for r in db.query("SELECT tbl, model FROM cpersona_vector_model")}


def cosine_scored(messages: list[dict[str, Any]]) -> list[str]:
    return [m["content"] for m in messages if "cosine" in m.get("match_reason", {})]


async def test_first_write_records_the_model(connect: Any) -> None:
    async with connect() as t:
        assert recorded(t.engine.settings) == {}
        await t.store(DOC)
        await t.episode("a session about deploys")
        assert recorded(t.engine.settings) == {
            "memories": "hashing:384",
            "episodes": "hashing:384",
        }


async def test_another_configured_model_is_served_by_the_stored_one(connect: Any) -> None:
    async with connect(embedder=HashingProvider(64)) as t:
        await t.store(DOC)
        path = t.engine.settings
    async with connect(embedder=HashingProvider(384)) as t:
        notice = t.engine.router.notice()
        assert notice is not None and "`cpersona reembed`" in notice and "hashing:64" in notice
        # The query is embedded by the stored model (64-wide), so the vector arm answers ...
        assert cosine_scored(await t.messages(QUERY)) == [DOC]
        # ... and a new row joins the table's model, not the configured one.
        await t.store("terraform state lives in an s3 bucket")
    assert widths(path) == {64}
    assert recorded(path) == {"memories": "hashing:64"}


async def test_a_model_unavailable_here_turns_the_vector_arm_off(connect: Any) -> None:
    async with connect() as t:
        await t.store(DOC)
        path = t.engine.settings
    with database(path) as db, db.atomic() as conn:
        conn.execute("UPDATE cpersona_vector_model SET model = 'api:text-embedding-3-large'")
    async with connect() as t:
        out = await t.recall(QUERY)
        assert cosine_scored(out["messages"]) == []
        assert out["advisory"]["degraded"] is True
        assert "text-embedding-3-large" in out["advisory"]["evidence"]
        assert "cpersona reembed" in out["advisory"]["runbook"]
        stored = await t("store", {"agent_id": "alice", "message": {"content": "a new fact"}})
        assert stored["embedded"] is False  # no vector of another model joins the table
        health = await t("check_health", {"checks": ["embedding_model"]})
        (issue,) = health["issues"]
        assert issue["type"] == "embedding_model_conversion_pending"
        fixed = await t("check_health", {"checks": ["null_embedding"], "fix": True})
        assert all(not i.get("re_embedded") for i in fixed["issues"])
    assert widths(path) == {384, None}


async def test_a_model_change_between_two_recalls_of_one_server_is_seen_by_the_second(
    connect: Any,
) -> None:
    # The second recall embeds by the route the first one read (no read before its snapshot);
    # its snapshot finds the record changed and answers by the new one.
    async with connect() as t:
        await t.store(DOC)
        assert cosine_scored(await t.messages(QUERY)) == [DOC]
        with database(t.engine.settings) as db, db.atomic() as conn:
            conn.execute("UPDATE cpersona_vector_model SET model = 'api:text-embedding-3-large'")
        out = await t.recall(QUERY)
        assert cosine_scored(out["messages"]) == []
        assert "text-embedding-3-large" in out["advisory"]["evidence"]


async def test_a_cut_over_between_embedding_and_commit_re_embeds_the_row(connect: Any) -> None:
    async with connect() as t:
        await t.store(DOC)
        path = t.engine.settings

        class SwitchesMidway(HashingProvider):
            """Embeds, then another process records the table as 32-wide (a cut-over)."""

            def embed(self, texts: Any, *, kind: Any = "passage") -> np.ndarray:
                out = super().embed(texts, kind=kind)
                with database(path) as db, db.atomic() as conn:
                    conn.execute(
                        "UPDATE memories SET embedding = ?",
                        (embedding_param(conn, bytes(128)),),
                    )
                    conn.execute("UPDATE cpersona_vector_model SET model = 'hashing:32', dim = 32")
                return out

        router = t.engine.router
        router.configured.inner = SwitchesMidway()
        router.configured._entries.clear()
        out = await t("store", {"agent_id": "alice", "message": {"content": "a racing write"}})
        assert out["embedded"] is True
    assert widths(path) == {32}


async def test_unrecorded_vectors_are_identified_when_first_served(connect: Any) -> None:
    async with connect() as t:
        await t.store(DOC)
        path = t.engine.settings
    with database(path) as db, db.atomic() as conn:
        conn.execute("DELETE FROM cpersona_vector_model")  # a database from before the record
    # The services (and the model probe with them) are built by the first call that needs them
    # (docs/notes/performance-notes.md, "Start-up"), not when the database is opened.
    async with connect() as t:
        await t("recall", {"agent_id": "alice", "query": "anything"})
    with database(path) as db:
        row = db.query_one("SELECT model, how FROM cpersona_vector_model WHERE tbl = 'memories'")
        assert tuple(row) == ("hashing:384", "probed")


@pytest.mark.parametrize("width", [64, 384])
async def test_a_table_whose_vectors_are_all_gone_is_claimed_again(
    connect: Any, width: int
) -> None:
    async with connect(embedder=HashingProvider(64)) as t:
        first = await t.store(DOC)
        await t("delete_memory", {"agent_id": "alice", "memory_id": first})
        path = t.engine.settings
    async with connect(embedder=HashingProvider(width)) as t:
        await t.store("a fact after the table emptied")
    assert widths(path) == {width}
    assert recorded(path) == {"memories": f"hashing:{width}"}
