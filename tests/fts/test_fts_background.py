"""No search waits for a rebuild of the full-text index (issue 20 item 2): on SQLite a file
that is missing or stale is rebuilt in the background while the FTS5 statements answer (the
same rows: the oracle), a rebuild that fails half way leaves the old file or none, and `cpersona
index status --kind fulltext` shows how far it is. (On PostgreSQL, with no FTS5, the rebuild
runs inside the call: tests/server/test_server_background_rebuild.py.)"""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import cpersona.derived.healing as healing
import cpersona.fts.rebuild as rebuild
import pytest
from cpersona.fts.index import FtsIndex
from cpersona.fts.search import ranked
from cpersona.retrieval.query import match_terms
from cpersona.storage import Database, open_database
from fts_support import HAS_CORE, fts_index, indexed, oracle, scope
from support.gate import Gate
from test_fts_healing import DAMAGE, TEXTS, fts_file, world

pytestmark = pytest.mark.skipif(not HAS_CORE, reason="the full-text index needs the Rust core")

QUERIES = ("maybe promotion", "東京都", "café the", "the end")
#: Found unusable by the sync: missing, an older format, a writer that died, another
#: database's, cut short, ahead of the log.
STALE = ["missing", "bad-version", "dirty", "foreign", "records-cut", "ahead-of-log"]
ROWS = len(TEXTS) * 4


@pytest.fixture
def opened(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Database, FtsIndex]]:
    """The world's database and its memories index; every rebuild in the background."""
    path = world(tmp_path)
    monkeypatch.setattr(healing, "INLINE_ROWS", 0)
    monkeypatch.setattr(healing, "STEP_ROWS", 1)
    db = open_database(str(path))
    ix = fts_index(db, "memories")
    yield db, ix
    ix.close()
    db.close()


def fts5(db: Database) -> list[list[tuple[int, float]] | None]:
    return [oracle(db, "memories", q, scope("a"), 10) for q in QUERIES]


@pytest.mark.parametrize("kind", STALE)
def test_a_search_during_the_rebuild_answers_from_fts5_at_once(
    opened: tuple[Database, FtsIndex], monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    db, ix = opened
    DAMAGE[kind](ix.path)
    gate = Gate(monkeypatch, rebuild, "put_record")
    for q in QUERIES:  # None: the caller runs the FTS5 statement (retrieval/pipeline.py)
        assert ranked(ix, match_terms(q), scope("a"), "", 10) is None
    assert gate.held.wait(60)
    assert ix.healing  # still held: the searches above did not wait for it
    during = fts5(db)
    gate.release()
    ix.wait_for_healing()
    assert [indexed(ix, q, scope("a"), 10) for q in QUERIES] == during
    assert ix.verify() == []
    assert ix.status().rebuild is None


def test_a_rebuild_that_fails_half_way_leaves_the_old_file(
    opened: tuple[Database, FtsIndex], monkeypatch: pytest.MonkeyPatch
) -> None:
    db, ix = opened
    DAMAGE["bad-version"](ix.path)
    old = ix.path.read_bytes()
    original = rebuild.put_record
    rows = [0]

    def full_disk(*args: Any) -> bytes:
        rows[0] += 1
        if rows[0] == 10:
            raise OSError(errno.ENOSPC, "No space left on device")
        return original(*args)

    monkeypatch.setattr(rebuild, "put_record", full_disk)
    assert ranked(ix, match_terms("maybe"), scope("a"), "", 10) is None
    ix.wait_for_healing()
    assert rows[0] == 10
    assert ix.path.read_bytes() == old
    names = sorted(p.name for p in ix.path.parent.iterdir() if ".heal" in p.name)
    assert names == []
    monkeypatch.setattr(rebuild, "put_record", original)
    assert ranked(ix, match_terms("maybe"), scope("a"), "", 10) is None  # rebuilt again
    ix.wait_for_healing()
    assert [indexed(ix, q, scope("a"), 10) for q in QUERIES] == fts5(db)


def test_progress_in_index_status(
    opened: tuple[Database, FtsIndex], monkeypatch: pytest.MonkeyPatch
) -> None:
    db, ix = opened
    fts_file(Path(db.path)).unlink()
    gate = Gate(monkeypatch, rebuild, "put_record")
    assert ranked(ix, match_terms("maybe"), scope("a"), "", 10) is None
    assert gate.held.wait(60)
    progress = ix.status().rebuild
    assert progress is not None and (progress.done, progress.total) == (2, ROWS)
    r = subprocess.run(
        [sys.executable, "-m", "cpersona", "index", "status", "--kind", "fulltext"],
        env={**os.environ, "CPERSONA_DB_PATH": db.path},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 1, r.stderr
    first = r.stdout.splitlines()[0]
    assert first == (
        f"memories full-text: {ix.path}: not usable (missing); rebuilding in the background "
        f"(process {os.getpid()}, missing): 2/{ROWS} rows (10%)"
    )
    gate.release()
    ix.wait_for_healing()
    assert ix.status().rebuild is None
