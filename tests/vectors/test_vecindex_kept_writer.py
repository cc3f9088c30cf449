"""The sync's writer is kept mapped between syncs (`slots.KeptWriter`): its `live_slots`, which
skips the pass over the ids for rows above every slot's id, answers exactly as the full pass
does, also while another writer appends to the same file; two indexes on one file (two
processes) that write in turn, rebuild and fail mid-apply keep a file `verify` finds right."""

from __future__ import annotations

from pathlib import Path

import cpersona.vectors.index as index_mod
import numpy as np
import pytest
from cpersona.vectors import checksums
from cpersona.vectors.format import TABLE_MEMORIES, VectorFileWriter
from cpersona.vectors.index import VectorIndex
from cpersona.vectors.slots import KeptWriter, file_key, live_slots, release
from hypothesis import given, settings
from hypothesis import strategies as st
from vecindex_support import IntEmbedder, new_engine

DIM = 3
# (which writer: 0 the kept one's, 1 another's on the same file; op: append an id or delete
# the slot at a position; the id or position)
OPS = st.lists(
    st.tuples(st.integers(0, 1), st.booleans(), st.integers(0, 40)), min_size=1, max_size=60
)


def _append(writer: VectorFileWriter, row_id: int) -> None:
    writer.append(
        row_id, 1000 + row_id, agent=1, project=2, channel=3, source=0,
        vector=np.ones(DIM, dtype=np.float32),
    )  # fmt: skip


@settings(max_examples=60, deadline=None)
@given(ops=OPS, queries=st.lists(st.lists(st.integers(0, 45), max_size=6), min_size=1))
def test_kept_live_slots_equal_the_full_pass(ops, queries, tmp_path_factory) -> None:
    path = tmp_path_factory.mktemp("kept") / "m.vec"
    writers = [VectorFileWriter.create(path, DIM, 80, bytes(16), TABLE_MEMORIES)]
    checksums.write(writers[0])
    writers.append(VectorFileWriter(path))  # a second mapping of the same file
    kept = KeptWriter(writers[0], checksums.SumWriter(writers[0]), ())
    try:
        for step, (who, append, value) in enumerate(ops):
            writer = writers[who]
            if append:
                _append(writer, value)
            elif writer.count:
                writer.set_deleted(value % writer.count)
            query = queries[step % len(queries)]
            assert kept.live_slots(query) == live_slots(writers[1], query)
    finally:
        kept.release()
        release(writers[1])


def _kept(index: VectorIndex) -> KeptWriter:
    kept = index._kept
    assert kept is not None
    return kept


def _store(engine, tag: str, n: int) -> list[int]:
    ids = []
    for i in range(n):
        out = engine.writer.store("a", {"content": f"{tag} row {i}"}, "", "")
        assert out["result"] == "stored", out
        ids.append(out["id"])
    return ids


def test_two_indexes_on_one_file_write_in_turn(tmp_path: Path) -> None:
    """Each engine stands for a process: its kept mapping must see the other's appends,
    updates and deletes, and a file the other rebuilt (a new inode) is mapped afresh."""
    a = new_engine(tmp_path / "m.db", IntEmbedder())
    b = new_engine(tmp_path / "m.db", IntEmbedder())
    try:
        first = _store(a, "a", 3)
        kept = _kept(a.indexes["memories"])
        for turn in range(4):
            mine = _store(b, f"b{turn}", 2)
            assert b.writer.update_memory(first[turn % 3], f"moved {turn}", "a")["ok"]
            assert b.writer.delete_memory(mine[0], "a")["ok"]
            _store(a, f"a{turn}", 2)  # a's sync applies b's log entries through its mapping
            assert a.indexes["memories"].verify() == []
        assert _kept(a.indexes["memories"]) is kept  # one mapping throughout
        b.indexes["memories"].rebuild()
        _store(a, "after rebuild", 2)
        assert _kept(a.indexes["memories"]) is not kept
        for engine in (a, b):
            assert engine.indexes["memories"].verify() == []
    finally:
        a.close()
        b.close()


def test_growth_remaps_and_rekeys(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(index_mod, "HEADROOM", 1)
    engine = new_engine(tmp_path / "m.db", IntEmbedder())
    try:
        _store(engine, "x", 2)
        index = engine.indexes["memories"]
        index.rebuild()  # capacity 3
        _store(engine, "y", 4)  # grows in the sync (a new file and sidecar renamed in)
        kept = _kept(index)
        header = kept.writer.header()
        assert kept.key == file_key(index.path, header.dim, header.capacity)
        _store(engine, "z", 1)
        assert _kept(index) is kept  # the re-keyed mapping is reused
        assert index.verify() == []
    finally:
        engine.close()


def test_a_failed_apply_drops_the_mapping_and_the_next_sync_repairs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = new_engine(tmp_path / "m.db", IntEmbedder())
    try:
        _store(engine, "x", 3)
        index = engine.indexes["memories"]
        real = index_mod.append_row

        def broken(*args, **kwargs):
            raise OSError("disk gone")

        monkeypatch.setattr(index_mod, "append_row", broken)
        out = engine.writer.store("a", {"content": "lost append"}, "", "")
        assert out["result"] == "stored"  # the row is committed; the index is behind
        assert index._kept is None
        monkeypatch.setattr(index_mod, "append_row", real)
        _store(engine, "y", 1)  # the dirty file is rebuilt (small table: inline)
        assert index.verify() == []
        rows = engine.db.query_one("SELECT COUNT(*) FROM memories")[0]
        assert index.status().live == rows
    finally:
        engine.close()
