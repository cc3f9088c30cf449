"""The full-text index's postings segment (fts/segment.py, docs/fts-index.md "Segment"): a
core mapped from the segment plus a delta of the records appended since answers as FTS5 does
and as a freshly built single segment does; a process opening an index another process is
appending to sees every row; a build killed before its rename leaves the old segment or none.

The thresholds are lowered so that tables of a few rows get segments and compactions."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest
from cpersona.fts import segment
from cpersona.storage import open_database
from fts_support import HAS_CORE, WORDS, fts_index, indexed, oracle, scope
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytestmark = pytest.mark.skipif(not HAS_CORE, reason="the full-text index needs the Rust core")

LOWERED = "from cpersona.fts import segment; segment.MIN_ROWS = 0; segment.DELTA_MIN = 3\n"


@pytest.fixture(autouse=True)
def _small_segments(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(segment, "MIN_ROWS", 0)
    monkeypatch.setattr(segment, "DELTA_MIN", 3)


def _store(db, rows: list[tuple[str, str]]) -> None:
    with db.atomic() as conn:
        for agent, text in rows:
            conn.execute(
                "INSERT INTO memories(agent_id, content, timestamp) VALUES (?, ?, '')",
                (agent, text),
            )


text = st.lists(st.sampled_from(WORDS), min_size=0, max_size=8).map(" ".join)
op = st.tuples(st.sampled_from(["insert", "insert", "update", "delete"]), st.integers(0, 40), text)
queries = st.lists(
    st.lists(st.sampled_from(WORDS), min_size=1, max_size=4).map(" ".join), max_size=3
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches=st.lists(st.lists(op, min_size=1, max_size=12), min_size=1, max_size=5), qs=queries)
def test_segment_plus_delta_equals_fts5_and_a_single_segment(batches, qs):
    with tempfile.TemporaryDirectory() as where:
        db = open_database(str(Path(where) / "seg.db"))
        writer = fts_index(db, "memories")
        try:
            for batch in batches:
                with db.atomic() as conn:
                    for kind, n, words in batch:
                        agent = "a" if n % 3 else "b"
                        if kind == "insert":
                            conn.execute(
                                "INSERT OR IGNORE INTO memories(agent_id, content, timestamp) "
                                "VALUES (?, ?, '')",
                                (agent, f"{words} {n}"),
                            )
                        elif kind == "update":
                            conn.execute(
                                "UPDATE OR IGNORE memories SET content = ? WHERE id = ?", (words, n)
                            )
                        else:
                            conn.execute("DELETE FROM memories WHERE id = ?", (n,))
                writer.sync()
                # A process opening the files now: segment + the delta after it.
                reader = fts_index(db, "memories")
                core = reader.current()
                assert core.segment is not None
                for q in [*qs, "the"]:
                    for sc in (scope("a"), scope("b")):
                        got = indexed(reader, q, sc, 7)
                        assert got == oracle(db, "memories", q, sc, 7)
                        # A single segment of everything, built afresh, answers the same.
                        segment.path_of(reader.path).unlink()
                        single = fts_index(db, "memories")
                        assert single.current().delta_slots == 0
                        assert indexed(single, q, sc, 7) == got
                        single.close()
                reader.close()
            assert writer.verify() == []
        finally:
            writer.close()
            db.close()


def _child(code: str, *args: str) -> subprocess.Popen[str]:
    here = Path(__file__).parent
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(here), *sys.path])}
    return subprocess.Popen(
        [sys.executable, "-c", LOWERED + textwrap.dedent(code), *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


APPENDER = """
    import sys
    from cpersona.storage import open_database
    from fts_support import fts_index
    db = open_database(sys.argv[1])
    index = fts_index(db, "memories")
    for batch in range(40):
        with db.atomic() as conn:
            for i in range(8):
                conn.execute(
                    "INSERT INTO memories(agent_id, content, timestamp) VALUES ('a', ?, '')",
                    (f"maybe the promotion {batch} {i} 東京都",),
                )
        index.sync()
    print("done", flush=True)
"""


def test_a_process_opening_an_index_another_is_appending_to_sees_every_row(tmp_path):
    path = tmp_path / "two.db"
    db = open_database(str(path))
    _store(db, [("a", f"first rows {i}") for i in range(20)])
    first = fts_index(db, "memories")
    first.sync()
    first.close()
    proc = _child(APPENDER, str(path))
    try:
        opened = 0
        while proc.poll() is None or opened == 0:
            before = {r[0] for r in db.query("SELECT id FROM memories")}
            index = fts_index(db, "memories")  # a fresh open each time, as a new process's
            got = set(index.current().ids().tolist())
            assert before <= got
            index.close()
            opened += 1
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        index = fts_index(db, "memories")
        rows = {r[0] for r in db.query("SELECT id FROM memories")}
        assert len(rows) == 340
        assert set(index.current().ids().tolist()) == rows
        assert index.current().segment is not None
        for q in ("maybe the promotion", "東京都 39", "first"):
            assert indexed(index, q, scope("a"), 30) == oracle(db, "memories", q, scope("a"), 30)
        assert index.verify() == []
        index.close()
    finally:
        if proc.poll() is None:
            proc.kill()
        db.close()


KILLED_BUILDER = """
    import os, sys, time
    from cpersona.storage import open_database
    from fts_support import fts_index
    real = os.replace
    def replace(src, dst):
        if ".seg.tmp" in str(src):
            print("PAUSE", flush=True)
            time.sleep(120)
        real(src, dst)
    os.replace = replace
    db = open_database(sys.argv[1])
    with db.atomic() as conn:
        for i in range(30):
            conn.execute(
                "INSERT INTO memories(agent_id, content, timestamp) VALUES ('a', ?, '')",
                (f"killed while building {i}",),
            )
    fts_index(db, "memories").sync()
    fts_index(db, "memories").current()  # a fresh open: the delta is compacted
"""


@pytest.mark.parametrize("had_segment", [False, True])
def test_a_build_killed_before_its_rename_leaves_the_old_segment_or_none(tmp_path, had_segment):
    path = tmp_path / "crash.db"
    db = open_database(str(path))
    _store(db, [("a", f"the old rows {i}") for i in range(10)])
    fts_index(db, "memories").sync()  # the rebuild (its own core stays in its heap)
    index = fts_index(db, "memories")
    index.current()  # the first open maps a segment, written then
    seg = segment.path_of(index.path)
    assert seg.exists()
    index.close()
    if not had_segment:
        seg.unlink()
    old = seg.read_bytes() if had_segment else None
    proc = _child(KILLED_BUILDER, str(path))
    assert proc.stdout is not None
    line = proc.stdout.readline()
    proc.send_signal(signal.SIGKILL)
    _, err = proc.communicate(timeout=60)
    assert line.startswith("PAUSE"), err
    leftovers = list(tmp_path.glob("*.seg.tmp*"))
    assert leftovers  # the killed build's temporary, complete or not, under its own name
    assert (seg.read_bytes() if seg.exists() else None) == old
    fresh = fts_index(db, "memories")
    for q in ("killed while building", "the old rows", "rows 7"):
        assert indexed(fresh, q, scope("a"), 50) == oracle(db, "memories", q, scope("a"), 50)
    assert fresh.verify() == []
    # This process wrote a new segment, and the dead process's temporary went with it.
    assert fresh.current().segment is not None
    assert not list(tmp_path.glob("*.seg.tmp*"))
    fresh.close()
    db.close()
