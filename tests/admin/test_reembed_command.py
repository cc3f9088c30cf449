"""`cpersona reembed` in process, with hashing models of two widths standing in for two models:
what it converts, what it leaves alone, and its refusals (exit codes and one-line reasons).
The kill-and-resume behaviour with real models and processes is in test_model_switch.py.
"""

from __future__ import annotations

import dataclasses
import io
import json
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest
from cpersona.commands.reembed import Converter, exclusive, run_reembed
from cpersona.config import Settings
from cpersona.embedding.hashing import HashingProvider
from cpersona.engine import Engine
from cpersona.server.app import build_server
from mcp import Client

pytestmark = pytest.mark.anyio

TEXTS = [f"note {i}: the build server needs {i} gigabytes of disk" for i in range(11)]


def settings(db: Path, **kw: object) -> Settings:
    return dataclasses.replace(Settings(db_path=str(db), embedding_mode="hashing"), **kw)


async def build(db: Path, width: int) -> None:
    engine = Engine(settings(db), embedder=HashingProvider(width))
    try:
        async with Client(build_server(engine), raise_exceptions=True) as client:
            for text in TEXTS:
                await client.call_tool("store", {"agent_id": "a", "message": {"content": text}})
            await client.call_tool(
                "archive_episode", {"agent_id": "a", "summary": "disk sizing", "history": []}
            )
    finally:
        engine.close()


def state(db: Path) -> tuple[dict[str, str], set[int], int]:
    with closing(sqlite3.connect(db)) as conn:
        models = dict(conn.execute("SELECT tbl, model FROM cpersona_vector_model"))
        widths = {
            r[0] // 4
            for t in ("memories", "episodes")
            for r in conn.execute(f"SELECT length(embedding) FROM {t}")
        }
        open_ = conn.execute("SELECT COUNT(*) FROM cpersona_reembed").fetchone()[0]
    return models, widths, open_


class StopsAfterStaging(Converter):
    """A conversion interrupted once the new vectors are staged, before the cut-over."""

    def _cut_over(self, tables: list[str]) -> None:
        raise KeyboardInterrupt  # stands in for a kill after staging


def stop_after_staging(engine: Engine) -> None:
    """Runs a conversion to `engine`'s model that is killed once the new vectors are staged."""
    with pytest.raises(KeyboardInterrupt):
        StopsAfterStaging(engine, io.StringIO(), batch=4).run()


async def test_converts_both_tables_in_batches(tmp_path: Path) -> None:
    db = tmp_path / "mem.db"
    await build(db, 64)
    out = io.StringIO()
    engine = Engine(settings(db), embedder=HashingProvider(384))
    try:
        assert Converter(engine, out, batch=4).run() == 0
    finally:
        engine.close()
    assert state(db) == ({"memories": "hashing:384", "episodes": "hashing:384"}, {384}, 0)
    lines = out.getvalue().splitlines()
    progress = [line for line in lines if line.startswith("reembed memories: ")]
    assert progress[-1].startswith("reembed memories: 11/11 rows (100%)")
    assert "rows/s" in progress[-1] and "left" in progress[-1]
    assert len(progress) >= 3  # one per batch of 4, plus the first
    assert "reembed: memories index verified" in lines


async def test_dry_run_counts_and_changes_nothing(tmp_path: Path) -> None:
    db = tmp_path / "mem.db"
    await build(db, 64)
    out = io.StringIO()
    assert run_reembed(settings(db), dry_run=True, batch=64, out=out) == 0
    text = out.getvalue()
    assert "memories: 11 rows to embed (0 of 11 already done)" in text
    assert "12 rows with hashing:384: about" in text
    assert state(db) == ({"memories": "hashing:64", "episodes": "hashing:64"}, {64}, 0)


async def test_nothing_to_convert(tmp_path: Path) -> None:
    db = tmp_path / "mem.db"
    await build(db, 384)
    out = io.StringIO()
    assert run_reembed(settings(db), dry_run=False, batch=64, out=out) == 0
    assert "nothing to convert" in out.getvalue()


def test_refusals(tmp_path: Path) -> None:
    out = io.StringIO()
    assert run_reembed(settings(tmp_path / "absent.db"), dry_run=False, batch=8, out=out) == 2
    assert "no database at" in out.getvalue()
    db = tmp_path / "mem.db"
    Engine(settings(db), embedder=HashingProvider()).close()
    out = io.StringIO()
    none = settings(db, embedding_mode="none")
    assert run_reembed(none, dry_run=False, batch=8, out=out) == 2
    assert "no model to convert to" in out.getvalue()


async def test_a_second_conversion_of_one_database_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "mem.db"
    await build(db, 64)
    with exclusive(str(db)) as mine:
        assert mine
        out = io.StringIO()
        assert run_reembed(settings(db), dry_run=False, batch=8, out=out) == 1
        assert "another `cpersona reembed` is converting" in out.getvalue()
    assert state(db)[0] == {"memories": "hashing:64", "episodes": "hashing:64"}


async def test_rows_another_process_writes_during_the_conversion_are_converted(
    tmp_path: Path,
) -> None:
    db = tmp_path / "mem.db"
    await build(db, 64)
    # Another server on the old model keeps writing while the conversion stages.
    other = Engine(settings(db), embedder=HashingProvider(64))
    written: list[dict[str, object]] = []

    class Busy(Converter):
        def _stage(self, table: str) -> None:
            super()._stage(table)
            if table == "memories" and len(written) < 3:
                text = f"written during the conversion {len(written)}"
                written.append(other.writer.store("a", {"content": text}, "", ""))

    engine = Engine(settings(db), embedder=HashingProvider(384))
    try:
        assert Busy(engine, io.StringIO(), batch=4).run() == 0
        # After the cut-over, the old-model server's writes join the new model.
        after = other.writer.store("a", {"content": "written after the cut-over"}, "", "")
    finally:
        engine.close()
        other.close()
    assert all(w["embedded"] for w in written) and after["embedded"]
    models, widths, open_ = state(db)
    assert (models, widths, open_) == (
        {"memories": "hashing:384", "episodes": "hashing:384"},
        {384},
        0,
    )


async def test_check_health_tells_a_running_from_an_interrupted_conversion(tmp_path: Path) -> None:
    db = tmp_path / "mem.db"
    await build(db, 64)
    engine = Engine(settings(db), embedder=HashingProvider(384))
    try:
        stop_after_staging(engine)
        async with Client(build_server(engine), raise_exceptions=True) as client:

            async def findings() -> dict[str, dict[str, object]]:
                result = await client.call_tool("check_health", {"checks": ["embedding_model"]})
                issues = json.loads(result.content[0].text)["issues"]
                return {i["type"]: i for i in issues}

            found = await findings()
            assert set(found) == {"reembed_interrupted"}  # twice: memories and episodes
            assert found["reembed_interrupted"]["severity"] == "warn"
            assert "cpersona reembed" in str(found["reembed_interrupted"]["hint"])
            with exclusive(str(db)):
                found = await findings()
            assert set(found) == {"reembed_running"}
            assert found["reembed_running"]["severity"] == "info"
    finally:
        engine.close()
    # Nothing moved: the old vectors still serve under the old record.
    assert state(db) == ({"memories": "hashing:64", "episodes": "hashing:64"}, {64}, 2)


async def test_a_conversion_begun_towards_another_model_is_dropped(tmp_path: Path) -> None:
    db = tmp_path / "mem.db"
    await build(db, 64)
    with closing(Engine(settings(db), embedder=HashingProvider(32))) as towards_32:
        stop_after_staging(towards_32)
    assert state(db)[2] == 2
    out = io.StringIO()
    # Configured back to the stored model: nothing to convert, and the stale conversion goes.
    engine = Engine(settings(db), embedder=HashingProvider(64))
    try:
        assert Converter(engine, out).run() == 0
    finally:
        engine.close()
    assert "dropping the unfinished conversion of memories to hashing:32" in out.getvalue()
    assert state(db) == ({"memories": "hashing:64", "episodes": "hashing:64"}, {64}, 0)
    with closing(sqlite3.connect(db)) as conn:
        assert conn.execute("SELECT COUNT(*) FROM cpersona_reembed_vectors").fetchone()[0] == 0
