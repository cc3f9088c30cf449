"""What the health checks read and write through (surface.md §9.2), and what a database holds.

Functions of storage/upkeep/ take the `Handle` the caller is working on: `reading(db)` for
report-only runs, the one `fixing(db)` opened for a fix run (so a check sees its own
repairs). A handle is opaque above storage/; it translates driver errors (storage/error_kinds.py).
Functions return ints, strings and small frozen row types, never driver rows. An agent scope
of "" means every agent. `subjects(db)` says which of the things some checks inspect exist in
a database (a check declares the ones it needs: health.check.Applies).
"""

from __future__ import annotations

import enum
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from cpersona.storage.db import quote_identifier
from cpersona.storage.error_kinds import translated
from cpersona.storage.interface import Connection, Store
from cpersona.storage.ops import SqlOps

Params = list[Any]


class Handle:
    """What a health run reads and writes through: this thread's reader, or the write
    transaction of a fix run. Only storage functions use its connection."""

    __slots__ = ("_conn", "_db")

    def __init__(self, db: Store, conn: Connection) -> None:
        self._db = db
        self._conn = conn

    @property
    def dialect(self) -> str:
        """The backend (db.dialect_of reads it, as of a connection)."""
        return self._db.dialect

    @property
    def ops(self) -> SqlOps:
        """The SQL fragments this backend spells its own way (storage/ops.py)."""
        return self._db.ops

    def holds(self, subject: Subject) -> bool:
        """Whether this database holds `subject`."""
        return subject in subjects(self._db)

    def vector_param(self, blob: bytes | None) -> object:
        """An embedding parameter for this backend (db.embedding_param calls it)."""
        return self._db.vector_param(blob)

    def execute(self, sql: str, params: Any = ()) -> Any:
        """Run one statement (storage/ only); driver errors leave translated."""
        with translated():
            return self._conn.execute(sql, params)

    @contextmanager
    def step(self) -> Iterator[None]:
        """A nested savepoint of the fix transaction: a failing block is rolled back alone."""
        with translated(), self._db.atomic():
            yield


Conn = Handle


def reading(db: Store) -> Handle:
    """A handle on this thread's reader (autocommit: each statement sees the newest commit)."""
    return Handle(db, db.reader())


@contextmanager
def fixing(db: Store) -> Iterator[Handle]:
    """One write transaction for a whole fix run: committed when the block ends, rolled back
    when it raises."""
    with translated(), db.atomic() as conn:
        yield Handle(db, conn)


@contextmanager
def writing(db: Store) -> Iterator[Handle]:
    """A short write transaction (a deep-check repair, a batch of re-embedded vectors)."""
    with fixing(db) as handle:
        yield handle


class Subject(enum.Enum):
    """What some checks inspect and not every database holds."""

    #: SQLite's FTS5 virtual tables (on PostgreSQL the full-text index is the Rust core's).
    FTS5_TABLES = "fts5_tables"
    #: The DDL text of SQLite's schema table (sqlite_master).
    SQLITE_DDL = "sqlite_ddl"
    #: A database file whose pages this host can check (PRAGMA quick_check).
    DATABASE_FILE = "database_file"
    #: Vector index files beside the database file, which the vector_index check inspects (on
    #: PostgreSQL the files are in each host's cache directory, outside the database's checks).
    VECTOR_FILES = "vector_files"


def subjects(db: Store) -> frozenset[Subject]:
    """The subjects `db` holds: all of them in an SQLite file, none on PostgreSQL."""
    return frozenset(Subject) if db.dialect == "sqlite" else frozenset()


def scope(agent_id: str, column: str = "agent_id") -> tuple[str, Params]:
    return (f" AND {column} = ?", [agent_id]) if agent_id else ("", [])


def scoped_rows(conn: Conn, sql: str, agent_id: str, *after: object) -> list[Any]:
    """The rows of `sql` whose `{scope}` is the agent's condition (nothing for every agent),
    its parameter bound before `after`."""
    where, params = scope(agent_id)
    return list(conn.execute(sql.format(scope=where), [*params, *after]).fetchall())


def ids_clause(ids: Sequence[int]) -> str:
    return ",".join("?" * len(ids))


def chunks(ids: Sequence[int], size: int = 500) -> Iterator[Sequence[int]]:
    for i in range(0, len(ids), size):
        yield ids[i : i + size]


def write_by_ids(conn: Conn, statement: str, ids: Sequence[int], *params: object) -> int:
    """The rows an UPDATE or DELETE changed, run over `ids` a chunk at a time (a statement's
    parameter count is bounded): `statement` ends where ` id IN (...)` is appended, and
    `params` are bound before the ids."""
    changed = 0
    for chunk in chunks(list(ids)):
        changed += conn.execute(
            f"{statement} id IN ({ids_clause(chunk)})", [*params, *chunk]
        ).rowcount
    return changed


def set_unlocked(conn: Conn, column: str, rows: Sequence[tuple[int, object]]) -> int:
    """Write one column of unlocked memories, (id, value) a row: the rows it changed."""
    changed = 0
    for row_id, value in rows:
        changed += conn.execute(
            f"UPDATE memories SET {column} = ? WHERE id = ? AND locked = 0", (value, row_id)
        ).rowcount
    return changed


@contextmanager
def savepoint(conn: Conn, name: str) -> Iterator[None]:
    """A nested savepoint: rolled back alone (restoring what it dropped) when the block fails."""
    conn.execute(f"SAVEPOINT {name}")
    try:
        yield
    except BaseException:
        conn.execute(f"ROLLBACK TO {name}")
        conn.execute(f"RELEASE {name}")
        raise
    conn.execute(f"RELEASE {name}")


def count(conn: Conn, table: str, agent_id: str = "") -> int:
    where, params = scope(agent_id)
    row = conn.execute(
        f"SELECT COUNT(*) FROM {quote_identifier(table)} WHERE 1=1{where}", params
    ).fetchone()
    return int(row[0])


def db_size(conn: Conn) -> int:
    """Bytes the database takes (on PostgreSQL: the database's files on the server)."""
    return int(conn.execute(conn.ops.database_bytes()).fetchone()[0])


def axis_counts(conn: Conn, column: str, agent_id: str, limit: int = 20) -> list[tuple[str, int]]:
    sql = (
        f"SELECT {column}, COUNT(*) AS n FROM memories WHERE 1=1{{scope}} "
        f"GROUP BY {column} ORDER BY n DESC, {column} LIMIT ?"
    )
    return [(str(r[0]), int(r[1])) for r in scoped_rows(conn, sql, agent_id, limit)]


def project_ids(conn: Conn, agent_id: str) -> list[str]:
    where, params = scope(agent_id)
    rows = conn.execute(
        f"SELECT project_id FROM memories WHERE 1=1{where} UNION "
        f"SELECT project_id FROM episodes WHERE 1=1{where}",
        params + params,
    ).fetchall()
    return [str(r[0]) for r in rows]


def agents(conn: Conn) -> list[str]:
    rows = conn.execute(
        "SELECT agent_id FROM memories UNION SELECT agent_id FROM profiles "
        "UNION SELECT agent_id FROM episodes ORDER BY 1"
    ).fetchall()
    return [str(r[0]) for r in rows]


def table_exists(conn: Conn, name: str) -> bool:
    return conn.execute(conn.ops.table_exists(), (name,)).fetchone() is not None


def schema_version(conn: Conn) -> int:
    return int(conn.execute("SELECT COALESCE(MAX(version), 0) FROM schema_version").fetchone()[0])
