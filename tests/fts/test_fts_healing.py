"""A damaged, foreign or stale index file is rebuilt from SQLite and never changes an answer;
`cpersona index status|rebuild|verify --kind fulltext` reports and repairs it."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from cpersona.fts.format import HEADER_LEN, OFF_DIRTY, Header
from cpersona.fts.search import ranked
from cpersona.retrieval.query import match_terms
from cpersona.storage import open_database
from fts_support import HAS_CORE, fts_index, indexed, oracle, scope
from support.commands import index_command

pytestmark = pytest.mark.skipif(not HAS_CORE, reason="the full-text index needs the Rust core")

TEXTS = ["maybe the promotion", "東京都に行った", "hiring decided", "Café au lait", "the end"]


def world(tmp_path: Path) -> Path:
    path = tmp_path / "m.db"
    db = open_database(str(path))
    with db.atomic() as conn:
        for i, text in enumerate(TEXTS * 4):
            conn.execute(
                "INSERT INTO memories(agent_id, content, timestamp) VALUES ('a', ?, '')",
                (f"{text} {i}",),
            )
        conn.execute("INSERT INTO episodes(agent_id, summary) VALUES ('a', 'the promotion party')")
    for table in ("memories", "episodes"):
        ix = fts_index(db, table)
        ix.sync()
        ix.close()
    db.close()
    return path


def fts_file(db: Path) -> Path:
    return Path(f"{db}.memories.fts")


def _patch(path: Path, offset: int, data: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(data)


DAMAGE = {
    "missing": lambda p: p.unlink(),
    "empty": lambda p: p.write_bytes(b""),
    "short-header": lambda p: p.write_bytes(p.read_bytes()[:50]),
    "bad-magic": lambda p: _patch(p, 0, b"XXXXXXXX"),
    "bad-version": lambda p: _patch(p, 8, (9).to_bytes(4, "little")),
    "dirty": lambda p: _patch(p, OFF_DIRTY, (1).to_bytes(4, "little")),
    "records-cut": lambda p: p.write_bytes(p.read_bytes()[:-3]),
    "foreign": lambda p: _patch(p, 24, os.urandom(16)),
    "ahead-of-log": lambda p: _patch(p, 16, (10**9).to_bytes(8, "little")),
    "garbled-record": lambda p: _patch(p, HEADER_LEN + 4, b"\x07"),
    # Same length, so the records still parse: only the checksum tells (issue 21).
    "overwritten-text": lambda p: _patch(p, p.read_bytes().index(b"maybe"), b"mayby"),
}
#: Damage to the records themselves: rebuilt in the background, the database answering
#: meanwhile (the others are rebuilt by the search that finds them).
CONTENT_DAMAGE = {"garbled-record", "overwritten-text"}


@pytest.mark.parametrize("kind", sorted(DAMAGE))
def test_damage_is_rebuilt_and_answers_stay_the_same(tmp_path: Path, kind: str) -> None:
    path = world(tmp_path)
    DAMAGE[kind](fts_file(path))
    db = open_database(str(path))
    try:
        ix = fts_index(db, "memories")
        if kind in CONTENT_DAMAGE:
            assert ranked(ix, match_terms("maybe promotion"), scope("a"), "", 10) is None
            ix.wait_for_healing()
        for q in ("maybe promotion", "東京都", "café the"):
            assert indexed(ix, q, scope("a"), 10) == oracle(db, "memories", q, scope("a"), 10)
        assert ix.verify() == []
        with open(fts_file(path), "rb") as f:
            header = Header.unpack(f.read(HEADER_LEN))
        assert header.dirty == 0 and header.live == len(TEXTS) * 4
        ix.close()
    finally:
        db.close()


def cli(db: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return index_command(db, *args, "--kind", "fulltext")


def test_cli_status_rebuild_verify(tmp_path: Path) -> None:
    path = world(tmp_path)
    r = cli(path, "status")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith(f"memories full-text: {fts_file(path)}: usable, current; 20 rows")
    assert lines[1].startswith("episodes full-text: ") and "usable, current; 1 rows" in lines[1]

    DAMAGE["dirty"](fts_file(path))
    r = cli(path, "status")
    assert r.returncode == 1
    assert "not usable (a writer stopped mid-update); the server rebuilds it" in r.stdout

    r = cli(path, "rebuild", "--table", "memories")
    assert (r.returncode, r.stdout) == (0, "memories full-text: rebuilt, 20 rows\n"), r.stderr
    r = cli(path, "verify")
    assert (r.returncode, r.stdout) == (
        0,
        "memories full-text: OK\nepisodes full-text: OK\n",
    ), r.stderr


def test_cli_verify_reports_a_row_that_differs(tmp_path: Path) -> None:
    path = world(tmp_path)
    data = fts_file(path).read_bytes()
    at = data.index(b"maybe")
    _patch(fts_file(path), at, b"mayby")  # same length, so the records still parse
    r = cli(path, "verify", "--table", "memories")
    assert r.returncode == 1
    assert "differs from SQLite" in r.stdout and "do not match their checksum" in r.stdout
    assert "memories full-text: 2 differences" in r.stdout
    assert cli(path, "rebuild").returncode == 0
    assert cli(path, "verify").returncode == 0
