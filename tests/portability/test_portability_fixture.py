"""The CPersona 2.5.12 fixture database: cpersona exports it and imports the export into an
empty database, and every row comes along. Its vectors are an unidentified model's (the
fixture's own hashing embedder, not this server's), so the export names no model for them and
the import embeds every row with the restoring server's model instead of keeping them (issue
21: a vector is kept only when it is the table's model's)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pytest
from cpersona.config import Settings
from cpersona.embedding.hashing import HashingProvider
from cpersona.storage import open_database
from portability_support import import_answer, read_jsonl

pytestmark = pytest.mark.anyio


_ROWS = (
    "SELECT agent_id, project_id, channel, content, msg_id, source, timestamp, metadata, "
    "locked, created_at, embedding FROM memories"
)


def memory_rows(db: Path) -> dict[tuple[str, str, str, str], tuple[object, ...]]:
    """(agent, project, channel, content) -> the row's other fields, embedding included."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        rows = conn.execute(_ROWS).fetchall()
    finally:
        conn.close()
    return {tuple(r[:4]): tuple(r[4:]) for r in rows}


def restored_rows(settings: Settings) -> dict[tuple[str, str, str, str], tuple[object, ...]]:
    """As `memory_rows`, of the database a restoring engine wrote (either backend)."""
    db = open_database(settings.db_path, database_url=settings.database_url, pool_size=1)
    try:
        rows = db.query(_ROWS)
    finally:
        db.close()
    return {tuple(r[:4]): tuple(r[4:]) for r in rows}


async def test_portability_fixture_export_imports_with_embeddings(
    connect, sample_db: Path, tmp_path: Path, export_dir: Path
):
    original = memory_rows(sample_db)  # read before cpersona opens (and migrates) it
    assert len(original) == 59 and all(row[-1] for row in original.values())
    # The 2.5.x file is SQLite whatever the backend; its export restores into the backend.
    async with connect(db_path=str(sample_db), database_url=None) as old:
        out = await old(
            "export_memories",
            {"agent_id": "", "output_path": "v2512.jsonl", "include_embeddings": True},
        )
        assert out["ok"] and (out["memories"], out["episodes"], out["profiles"]) == (59, 3, 1)
    exported = read_jsonl(export_dir / "v2512.jsonl")
    assert all("embedding_b64" in r for r in exported if r["_type"] in ("memory", "episode"))

    restored_db = tmp_path / "restored.db"
    async with connect(db_path=str(restored_db)) as new:
        out = await new("import_memories", {"input_path": "v2512.jsonl"})
        hint = out.pop("foreign_vectors_hint")
        assert out == import_answer(
            memories=(59, 0),
            episodes=(3, 0),
            embedded_on_import=62,
            foreign_vectors={"model_not_named": 62},
        )
        assert "not kept" in hint
        alice = await new("list_memories", {"agent_id": "alice", "limit": 500})
        assert alice["count"] == 39
        assert sum(1 for m in alice["memories"] if m["locked"]) == 1
        assert (await new("get_profile", {"agent_id": "alice"}))["profile"]
        episodes = await new("list_episodes", {"agent_id": "alice"})
        assert episodes["count"] == 3
    # Every field, row for row; each vector is this server's embedding of the row's text.
    restored = restored_rows(new.engine.settings)
    assert {k: v[:-1] for k, v in restored.items()} == {k: v[:-1] for k, v in original.items()}
    model = HashingProvider()
    for (_, _, _, content), fields in restored.items():
        assert bytes(fields[-1]) == model.embed([content])[0].astype("<f4").tobytes()
        assert bytes(fields[-1]) != original[next(k for k in original if k[3] == content)][-1]
    assert np.frombuffer(bytes(fields[-1]), "<f4").shape == (384,)
