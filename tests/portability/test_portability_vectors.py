"""Imported vectors always match their table's model (issue 21 item 3).

An export names the model of each table's vectors (`embedding_models` in its header). An
import keeps a row's vector only when the file names the target table's model and the vector
has its width; otherwise (another model of the same width, another width, or no model named,
as in a 2.5.x file) the row is stored with this server's embedding of its text, so a phrase
whose vector the file carried never finds the row at cosine 1.0.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from cpersona.embedding.hashing import HashingProvider

pytestmark = pytest.mark.anyio

MODEL = HashingProvider()
CONTENT = "the quarterly budget meeting moved to thursday"
#: Whose vector the hostile file carries for CONTENT's row.
OTHER_PHRASE = "purple elephants dance under the moon"


def b64(vector: np.ndarray) -> str:
    return base64.b64encode(vector.astype("<f4").tobytes()).decode("ascii")


def write_export(path: Path, models: dict[str, Any] | None, vector: np.ndarray) -> None:
    header: dict[str, Any] = {
        "_type": "header",
        "version": "cpersona-export/1.0",
        "agent_id": "a",
        "memory_count": 1,
        "episode_count": 1,
        "profile_count": 0,
    }
    if models is not None:
        header["embedding_models"] = models
    rows = [
        header,
        {"_type": "memory", "agent_id": "a", "content": CONTENT, "embedding_b64": b64(vector)},
        {"_type": "episode", "agent_id": "a", "summary": CONTENT, "embedding_b64": b64(vector)},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def stored_vectors(tools: Any) -> list[bytes]:
    return [
        bytes(r[0])
        for table in ("memories", "episodes")
        for r in tools.engine.db.query(f"SELECT embedding FROM {table} ORDER BY id")
        if r[0] is not None
    ]


OURS = {t: {"model": MODEL.name, "dim": 384} for t in ("memories", "episodes")}
CASES = {
    # (the header's embedding_models, the width of the file's vectors, why it is refused)
    "another-model-same-width": (
        {t: {"model": "someone-else:384", "dim": 384} for t in OURS},
        384,
        "another_model",
    ),
    "another-width": (OURS, 768, "another_width"),
    "no-model-named": (None, 384, "model_not_named"),
}


@pytest.mark.parametrize("case", sorted(CASES))
async def test_a_foreign_vector_is_not_kept_and_the_row_is_embedded_here(
    connect: Any, export_dir: Path, case: str
) -> None:
    models, width, why = CASES[case]
    other = HashingProvider(width).embed([OTHER_PHRASE])[0]
    write_export(export_dir / "hostile.jsonl", models, other)
    async with connect() as tools:
        # Give the table its model first, as a database in use has.
        await tools("store", {"agent_id": "a", "message": {"content": "an earlier note"}})
        dry = await tools("import_memories", {"input_path": "hostile.jsonl", "dry_run": True})
        assert dry["foreign_vectors"] == {why: 2}
        out = await tools("import_memories", {"input_path": "hostile.jsonl"})
        assert (out["imported_memories"], out["imported_episodes"]) == (1, 1)
        assert out["foreign_vectors"] == {why: 2}
        assert out["embedded_on_import"] == 2
        assert "missing_embeddings" not in out
        ours = MODEL.embed([CONTENT])[0].astype("<f4").tobytes()
        assert stored_vectors(tools)[1:] == [ours, ours]
        # The phrase whose vector the file carried does not find the row by that vector.
        found = await tools("recall", {"agent_id": "a", "query": OTHER_PHRASE, "limit": 5})
        cosines = [m["match_reason"].get("cosine", 0.0) for m in found["messages"]]
        assert all(c < 0.5 for c in cosines), found
        found = await tools("recall", {"agent_id": "a", "query": CONTENT, "limit": 5})
        top = max(found["messages"], key=lambda m: m["match_reason"]["score"])
        # The memory or the episode ("[Episode] ..."): both are found by their own vector.
        assert CONTENT in top["content"] and top["match_reason"]["cosine"] > 0.999


async def test_the_tables_own_model_is_kept_byte_for_byte(connect: Any, export_dir: Path) -> None:
    vector = MODEL.embed([CONTENT])[0] * np.float32(1.0)  # exactly what this model makes
    write_export(export_dir / "ours.jsonl", OURS, vector)
    async with connect() as tools:
        out = await tools("import_memories", {"input_path": "ours.jsonl"})
        assert "foreign_vectors" not in out and "embedded_on_import" not in out
        assert stored_vectors(tools) == [vector.astype("<f4").tobytes()] * 2


async def test_an_export_names_its_model_and_round_trips_its_vectors(
    connect: Any, export_dir: Path, tmp_path: Path
) -> None:
    async with connect() as tools:
        await tools("store", {"agent_id": "a", "message": {"content": CONTENT}})
        out = await tools(
            "export_memories",
            {"agent_id": "a", "output_path": "mine.jsonl", "include_embeddings": True},
        )
        assert out["ok"]
        before = stored_vectors(tools)
    header = json.loads((export_dir / "mine.jsonl").read_text().splitlines()[0])
    assert header["embedding_models"]["memories"] == {"model": MODEL.name, "dim": 384}
    async with connect(db_path=str(tmp_path / "restored.db")) as tools:
        out = await tools("import_memories", {"input_path": "mine.jsonl"})
        assert out["imported_memories"] == 1 and "foreign_vectors" not in out
        assert stored_vectors(tools) == before


async def test_without_an_embedding_model_the_rows_wait_for_one(
    connect: Any, export_dir: Path
) -> None:
    write_export(export_dir / "old.jsonl", None, MODEL.embed([OTHER_PHRASE])[0])
    async with connect(embedding_mode="none", embedder=_Unavailable()) as tools:
        out = await tools("import_memories", {"input_path": "old.jsonl"})
        assert out["foreign_vectors"] == {"model_not_named": 2}
        assert out["missing_embeddings"] == 2  # check_health(fix=true) fills them later
        assert stored_vectors(tools) == []


class _Unavailable:
    """The `none` embedding mode: no model at all."""

    available = False
    name = "none"

    def dim(self) -> None:
        return None

    def embed(self, texts: Any, *, kind: str = "passage") -> np.ndarray:
        raise AssertionError("nothing may be embedded without a model")

    def close(self) -> None:
        pass
