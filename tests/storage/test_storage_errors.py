"""Backend-neutral storage errors (storage/error_kinds.py): real driver failures of both backends
arrive above storage/ as the same kinds, with the driver's message and the driver's error
chained."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from cpersona.models import NewMemory
from cpersona.storage import error_kinds, open_database
from cpersona.storage import writes as sql
from cpersona.storage.error_kinds import (
    BusyError,
    ConstraintError,
    CorruptError,
    DiskFullError,
    OperationalError,
    StorageError,
    is_disk_full,
    translated,
    translating,
)


def _raised(block: object) -> StorageError:
    with pytest.raises(StorageError) as info, translated():
        block()  # type: ignore[operator]
    return info.value


def test_sqlite_constraint_missing_table_busy_and_corrupt(tmp_path: Path) -> None:
    path = tmp_path / "a.db"
    conn = sqlite3.connect(path, isolation_level=None, timeout=0)
    conn.execute("CREATE TABLE t (x TEXT UNIQUE)")
    conn.execute("INSERT INTO t VALUES ('one')")

    err = _raised(lambda: conn.execute("INSERT INTO t VALUES ('one')"))
    assert type(err) is ConstraintError
    assert str(err) == str(err.__cause__) == "UNIQUE constraint failed: t.x"
    assert isinstance(err.__cause__, sqlite3.IntegrityError)

    err = _raised(lambda: conn.execute("SELECT * FROM nowhere"))
    assert type(err) is OperationalError
    assert str(err) == "no such table: nowhere"

    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    err = _raised(lambda: conn.execute("BEGIN IMMEDIATE"))
    assert type(err) is BusyError and isinstance(err, OperationalError)
    holder.execute("ROLLBACK")

    junk = tmp_path / "junk.db"
    junk.write_bytes(b"this is not a database file at all" * 200)
    other = sqlite3.connect(junk)
    err = _raised(lambda: other.execute("SELECT * FROM sqlite_master"))
    assert type(err) is CorruptError
    for c in (conn, holder, other):
        c.close()


def test_untranslatable_errors_pass_unchanged() -> None:
    with pytest.raises(KeyError), translated():
        raise KeyError("not a driver error")
    assert error_kinds.translate(ValueError("x")) is None


def test_translating_covers_generators_midway(tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / "g.db")

    @translating
    def rows() -> Iterator[int]:
        yield 1
        conn.execute("SELECT * FROM gone")
        yield 2

    it = rows()
    assert next(it) == 1
    with pytest.raises(OperationalError, match="no such table: gone"):
        next(it)
    conn.close()


def test_is_disk_full_sees_translated_and_chained_kinds() -> None:
    assert is_disk_full(DiskFullError("database or disk is full"))
    assert not is_disk_full(BusyError("database is locked"))
    try:
        try:
            raise OSError(28, "No space left on device")
        except OSError as inner:
            raise RuntimeError("wrapped") from inner
    except RuntimeError as outer:
        assert is_disk_full(outer)


def _memory(content: str) -> NewMemory:
    return NewMemory("a", "", "", content, "{}", "", "{}", "", None)


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_update_to_a_taken_text_is_a_constraint_error_on_both_backends(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    url = request.getfixturevalue("pg_url") if kind == "postgresql" else None
    db = open_database(str(tmp_path / "m.db"), database_url=url)
    try:
        first = sql.store_memory(db, _memory("first text"), None)
        second = sql.store_memory(db, _memory("second text"), None)
        assert first.id is not None and second.id is not None
        with pytest.raises(ConstraintError) as info:
            sql.update_memory(db, second.id, "first text", None)
        assert "unique" in str(info.value).lower()
        # The failed write was rolled back whole: the row keeps its text.
        assert sql.find_duplicate(db, _memory("second text")) is not None
    finally:
        db.close()


def test_postgresql_states_map_to_the_same_kinds() -> None:
    psycopg = pytest.importorskip("psycopg")
    from cpersona.storage.pg import errors as pg_errors
    from cpersona.storage.pg.connection import _mapped

    pg_errors.install()
    cases = {
        psycopg.errors.DiskFull: DiskFullError,
        psycopg.errors.LockNotAvailable: BusyError,
        psycopg.errors.DeadlockDetected: BusyError,
        psycopg.errors.SerializationFailure: BusyError,
        psycopg.errors.DataCorrupted: CorruptError,
        psycopg.errors.UniqueViolation: ConstraintError,
        psycopg.errors.UndefinedTable: OperationalError,
        psycopg.errors.AdminShutdown: OperationalError,
        psycopg.errors.InternalError_: StorageError,
    }
    for pg_class, kind in cases.items():
        assert error_kinds.kind_of(pg_class("boom")) is kind, pg_class
        # PgDatabase re-raises psycopg's error as the sqlite3 class SQLite would raise,
        # chained (storage/pg/db.py): the more specific kind of the cause wins.
        cause = pg_class("boom")
        mapped = _mapped(cause)
        mapped.__cause__ = cause
        assert isinstance(mapped, sqlite3.Error)
        assert error_kinds.kind_of(mapped) is kind, pg_class
        assert is_disk_full(mapped) is (kind is DiskFullError)
