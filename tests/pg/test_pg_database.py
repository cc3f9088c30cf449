"""PgDatabase itself: rows, transactions, the write lock, vectors, the change log."""

from __future__ import annotations

import sqlite3
import struct
import threading
from collections.abc import Iterator

import pytest
from cpersona.storage import open_database
from cpersona.storage.pg.db import PgDatabase


@pytest.fixture
def db(pg_url: str) -> Iterator[PgDatabase]:
    database = open_database("", database_url=pg_url, pool_size=4)
    yield database  # type: ignore[misc]
    database.close()


def insert(conn, content: str, embedding: bytes | None = None) -> int | None:
    rows = conn.execute(
        "INSERT INTO memories (agent_id, content, timestamp, embedding) "
        "VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING RETURNING id",
        ("a", content, "2026-01-01T00:00:00+00:00", conn.vector_param(embedding)),
    ).fetchall()
    return rows[0][0] if rows else None


def test_rows_answer_by_index_name_and_as_tuples(db: PgDatabase) -> None:
    with db.atomic() as conn:
        new = insert(conn, "x")
    row = db.query_one("SELECT id, agent_id AS Agent FROM memories WHERE id = ?", (new,))
    assert row is not None
    assert (row[0], row["agent"], row["AGENT"], tuple(row)) == (new, "a", "a", (new, "a"))


def test_insert_or_ignore_reports_the_new_id_or_nothing(db: PgDatabase) -> None:
    with db.atomic() as conn:
        first = insert(conn, "same")
        again = insert(conn, "same")
    assert isinstance(first, int) and again is None


def test_a_unique_violation_is_an_integrity_error_and_rolls_back(db: PgDatabase) -> None:
    with pytest.raises(sqlite3.IntegrityError), db.atomic() as conn:
        insert(conn, "kept?")
        conn.execute(
            "INSERT INTO memories (agent_id, content, timestamp) VALUES ('a', 'kept?', '')"
        )
    assert db.query("SELECT content FROM memories") == []


def test_nested_atomic_is_a_savepoint(db: PgDatabase) -> None:
    with db.atomic() as conn:
        insert(conn, "outer")
        with pytest.raises(sqlite3.IntegrityError), db.atomic() as inner:
            insert(inner, "inner")
            inner.execute(
                "INSERT INTO memories (agent_id, content, timestamp) VALUES ('a', 'inner', '')"
            )
    assert [r[0] for r in db.query("SELECT content FROM memories")] == ["outer"]


def test_vectors_round_trip_as_float32_bytes_and_invalid_blobs_are_null(db: PgDatabase) -> None:
    blob = struct.pack("<3f", 0.1, -2.5, 3e-38)
    with db.atomic() as conn:
        good = insert(conn, "v", blob)
        ragged = insert(conn, "r", b"\x00\x00\x80")
        nan = insert(conn, "n", struct.pack("<2f", 1.0, float("nan")))
        empty = insert(conn, "e", b"")
    stored = {r[0]: r[1] for r in db.query("SELECT id, embedding FROM memories")}
    assert stored[good] == blob
    assert stored[ragged] is None and stored[nan] is None and stored[empty] is None
    assert (
        db.query_one(
            f"SELECT {db.ops.byte_length('embedding')} FROM memories WHERE id = ?", (good,)
        )[0]
        == 12
    )


def test_snapshot_reads_see_one_state(db: PgDatabase) -> None:
    reader = db.reader()
    reader.execute("BEGIN")
    assert reader.in_transaction
    before = reader.execute("SELECT COUNT(*) FROM memories").fetchone()[0]
    with db.atomic() as conn:
        insert(conn, "later")
    assert reader.execute("SELECT COUNT(*) FROM memories").fetchone()[0] == before
    reader.execute("COMMIT")
    assert db.query_one("SELECT COUNT(*) FROM memories")[0] == before + 1


def test_maintenance_writes_are_serialised(pg_url: str, db: PgDatabase) -> None:
    # A second database object (another process's pool) waits for the first's transaction:
    # `atomic()` (exclusive, maintenance) still runs alone; the write tools' transactions
    # (`atomic(exclusive=False)`) do not wait for each other (tests/pg/test_pg_write_locks.py).
    other = open_database("", database_url=pg_url, pool_size=2)
    order: list[str] = []
    inside = threading.Event()

    def second() -> None:
        inside.wait()
        with other.atomic(exclusive=False) as conn:
            order.append("second")
            insert(conn, "second")

    thread = threading.Thread(target=second)
    thread.start()
    with db.atomic() as conn:
        inside.set()
        thread.join(timeout=0.5)  # it cannot get in while this transaction holds the lock
        order.append("first")
        insert(conn, "first")
    thread.join()
    other.close()
    assert order == ["first", "second"]


def _kill_sessions(url: str) -> int:
    """Terminate every session of `url`'s database from outside (as a server restart does to
    pooled connections); how many there were."""
    import psycopg
    from pg_support import _server_uri

    name = url.partition("?")[0].rsplit("/", 1)[1]
    with psycopg.connect(_server_uri(), autocommit=True) as admin:
        rows = admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s",
            (name,),
        ).fetchall()
    return len(rows)


def test_dead_connections_are_replaced_not_handed_out_again(pg_url: str, db: PgDatabase) -> None:
    """Issue 21: every pooled connection killed (the server restarted meanwhile). Reads,
    read transactions and writes on any thread work at once, on a fresh pool; before, a
    BEGIN that met a dead connection left it pinned to its thread for good."""
    with db.atomic() as conn:
        insert(conn, "before")
    assert _kill_sessions(pg_url) >= 1
    reader = db.reader()
    reader.execute("BEGIN")  # the statement that met a dead connection in issue 21
    assert reader.execute("SELECT COUNT(*) FROM memories").fetchone()[0] == 1
    reader.execute("COMMIT")
    assert _kill_sessions(pg_url) >= 1
    with db.atomic() as conn:
        insert(conn, "after")
    assert _kill_sessions(pg_url) >= 1
    counts: list[int] = []
    threads = [
        threading.Thread(target=lambda: counts.append(db.query("SELECT 1 FROM memories").__len__()))
        for _ in range(6)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert counts == [2] * 6
    seen = db.reachability()
    assert (seen.reachable, seen.outages, seen.pool_replacements) == (True, 0, 3)


def test_a_pool_with_every_connection_in_use_answers_busy(pg_url: str) -> None:
    """The wait for a pooled connection is bounded by the connect timeout, and says why."""
    from cpersona.storage.error_kinds import BusyError

    db = open_database("", database_url=pg_url, pool_size=1, connect_timeout=0.3)
    holding, release = threading.Event(), threading.Event()

    def hold() -> None:
        reader = db.reader()
        reader.execute("BEGIN")  # keeps the pool's only connection
        holding.set()
        release.wait(30)
        reader.execute("COMMIT")

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert holding.wait(30)
        with pytest.raises(BusyError, match=r"no connection to the database became free within"):
            db.query("SELECT 1")
    finally:
        release.set()
        holder.join(timeout=30)
    assert db.query("SELECT 1") == [(1,)]
    db.close()


def test_a_commit_cut_off_says_whether_it_was_stored_is_unknown(pg_url: str) -> None:
    """The connection dies as COMMIT is sent: the write may or may not have been stored,
    and the error says so (never that it was rolled back)."""
    import psycopg
    from cpersona.storage.error_kinds import InDoubtError
    from pg_support import _server_uri

    doomed: list[int] = []

    def tracer(sql: str, params: object) -> None:
        if sql == "COMMIT" and doomed:
            with psycopg.connect(_server_uri(), autocommit=True) as admin:
                admin.execute("SELECT pg_terminate_backend(%s)", (doomed.pop(),))

    db = PgDatabase(pg_url, pool_size=2, tracer=tracer)
    try:
        unknown = pytest.raises(InDoubtError, match="whether it was stored is unknown")
        with unknown, db.atomic() as conn:
            insert(conn, "in doubt")
            doomed.append(int(conn.execute_raw("SELECT pg_backend_pid()").fetchone()[0]))
        with db.atomic() as conn:  # the next write works, on a fresh pool
            insert(conn, "next")
        assert [r[0] for r in db.query("SELECT content FROM memories")] == ["next"]
    finally:
        db.close()
