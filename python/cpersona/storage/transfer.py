"""SQL of `cpersona migrate`: the copied tables, keyset batches, the progress record, the
identity high-water marks and the verification reads, for either backend at either end.

What is copied is the user's data and the records that describe it (which model made the
vectors, a model conversion in progress), by primary key, in key order. Everything else is
either the target's own (its schema version, named migrations, `cpersona_meta` with its
database identity) or derived and rebuilt by the target (FTS5 tables, the change logs and the
index files they feed).

The progress record is a table in the target, written in the same transaction as each batch:
after a kill, the target holds exactly the batches whose progress it records.

The SQL is written once for both backends; what differs (a table's columns, an identity's
high-water mark) comes from the database's operations (storage/ops.py).
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

from cpersona.storage import open_database
from cpersona.storage.db import Database, quote_identifier
from cpersona.storage.interface import Connection, Store

if TYPE_CHECKING:
    from cpersona.storage.pg.connection import PgConnection

#: A row's primary key, as a tuple even when it is one column.
Key = tuple[object, ...]
Row = tuple[object, ...]

PROGRESS_TABLE = "cpersona_migrate_progress"


@dataclass(frozen=True, slots=True)
class Copied:
    """One copied table: its primary key and the column holding a vector (if any)."""

    name: str
    key: tuple[str, ...]
    vector: str | None = None
    #: Whether the key is an identity column whose high-water mark travels with the rows.
    identity: bool = False


#: In copy order: a staged vector (cpersona_reembed_vectors) names a row copied before it.
TABLES: tuple[Copied, ...] = (
    Copied("memories", ("id",), "embedding", identity=True),
    Copied("episodes", ("id",), "embedding", identity=True),
    Copied("profiles", ("id",), identity=True),
    Copied("pending_memory_tasks", ("id",), identity=True),
    Copied("cpersona_vector_model", ("tbl",)),
    Copied("cpersona_reembed", ("tbl",)),
    Copied("cpersona_reembed_vectors", ("tbl", "row_id"), "embedding"),
    # The alias ledger travels: a per-subject server refuses a database whose aliases its
    # ledger did not issue. The pauses (cpersona_pauses) do not: a minutes-long TTL of the
    # servers that were stopped for the move.
    Copied("cpersona_subject_aliases", ("issuer", "subject")),
    # CPersona 2.6's declared associations (issue 32): entities before what names them.
    Copied("entities", ("id",), identity=True),
    Copied("entity_aliases", ("entity_id", "normalized")),
    Copied("entity_mentions", ("entity_id", "ref")),
    Copied("relations", ("id",), identity=True),
)


def _q(name: str) -> str:
    return quote_identifier(name)


#: Connections a migration holds on a PostgreSQL end (it reads or writes from one thread).
PG_POOL = 2


def is_url(location: str) -> bool:
    """Whether `location` names a PostgreSQL database rather than an SQLite file."""
    return location.startswith(("postgresql://", "postgres://"))


def label(location: str) -> str:
    """How messages name `location`: a URL without its password, a path made absolute."""
    if is_url(location):
        from cpersona.storage.pg.connection import redact

        return redact(location)
    return os.path.abspath(location)


# -- opening both ends -----------------------------------------------------------------------


class OpenFailed(Exception):
    """A database that cannot be opened for a migration (the message is one line)."""


def open_read_only(location: str) -> Store:
    """The database at `location` (a path or a PostgreSQL URL), opened for reading only and
    left at whatever schema it has.

    Raises:
        OpenFailed: it cannot be opened.
    """
    if not is_url(location):
        try:
            return Database(location, read_only=True)
        except sqlite3.Error as exc:
            raise OpenFailed(f"cannot open {os.path.abspath(location)}: {exc}") from None
    from cpersona.storage.pg.db import ConnectionFailed, PgDatabase

    try:
        return PgDatabase(location, pool_size=PG_POOL, read_only=True)
    except ConnectionFailed as exc:
        raise OpenFailed(f"{label(location)}: {exc}") from None


def open_target(location: str, *, fts_enabled: bool) -> Store:
    """The database at `location`, created if needed and migrated to the current schema.

    Raises:
        OpenFailed: it cannot be opened or migrated.
    """
    if not is_url(location):
        try:
            return open_database(location, fts_enabled=fts_enabled)
        except (sqlite3.Error, OSError) as exc:
            raise OpenFailed(
                f"cannot use {os.path.abspath(location)} as the target: {exc}"
            ) from None
    from cpersona.storage.pg.db import ConnectionFailed
    from cpersona.storage.pg.schema import MissingExtension

    try:
        return open_database("", database_url=location, pool_size=PG_POOL)
    except (ConnectionFailed, MissingExtension) as exc:
        raise OpenFailed(f"{label(location)}: {exc}") from None
    except sqlite3.Error as exc:  # what PgDatabase makes of the server's errors
        raise OpenFailed(f"cannot use {label(location)} as the target: {exc}") from None


# -- what a database holds -------------------------------------------------------------------


def columns(db: Store, table: str) -> list[str]:
    """The stored columns of `table` in declaration order; empty when there is no such table.

    PostgreSQL's generated columns (`created_key`, `source_id`: storage/pg/vectors.py) are
    derived from the others: never copied, and never written."""
    return [str(r[0]) for r in db.query(db.ops.column_names(), (table,))]


def schema_version(db: Store) -> int:
    """MAX(schema_version.version): 13 for CPersona 2.5.12 and cpersona; 0 when absent."""
    if not columns(db, "schema_version"):
        return 0
    row = db.query_one("SELECT COALESCE(MAX(version), 0) FROM schema_version")
    return int(row[0]) if row else 0


def database_uid(db: Store) -> bytes | None:
    """cpersona's identity of the database (`cpersona_meta.db_uid`); None for a 2.5.x file."""
    if not columns(db, "cpersona_meta"):
        return None
    row = db.query_one("SELECT value FROM cpersona_meta WHERE key = 'db_uid'")
    return bytes(row[0]) if row else None


def count(db: Store, table: Copied, upto: Key | None = None) -> int:
    """Rows of `table` (0 when it does not exist), only those with key <= `upto` if given."""
    if not columns(db, table.name):
        return 0
    sql = f"SELECT COUNT(*) FROM {_q(table.name)}"
    params: tuple[object, ...] = ()
    if upto is not None:
        sql += f" WHERE {_key_expr(table)} <= {_key_params(table)}"
        params = tuple(upto)
    row = db.query_one(sql, params)
    return int(row[0]) if row else 0


def _key_expr(table: Copied) -> str:
    cols = ", ".join(_q(c) for c in table.key)
    return cols if len(table.key) == 1 else f"({cols})"


def _key_params(table: Copied) -> str:
    marks = ", ".join("?" for _ in table.key)
    return marks if len(table.key) == 1 else f"({marks})"


@contextlib.contextmanager
def snapshot(db: Store) -> Iterator[None]:
    """Every read of this thread through `db` inside sees one snapshot of `db`."""
    conn = db.reader()
    if conn.in_transaction:
        yield
        return
    conn.execute("BEGIN")
    try:
        yield
    finally:
        conn.execute("COMMIT")


# -- the copy --------------------------------------------------------------------------------


def read_batch(
    db: Store, table: Copied, cols: Sequence[str], after: Key | None, limit: int
) -> list[Row]:
    """Up to `limit` rows of `table` with key > `after` (all when None), in key order; each row
    is the key's values followed by `cols`."""
    select = ", ".join(_q(c) for c in (*table.key, *cols))
    sql = f"SELECT {select} FROM {_q(table.name)}"
    params: list[object] = []
    if after is not None:
        sql += f" WHERE {_key_expr(table)} > {_key_params(table)}"
        params += list(after)
    sql += " ORDER BY " + ", ".join(_q(c) for c in table.key) + " LIMIT ?"
    params.append(limit)
    return [tuple(r) for r in db.query(sql, params)]


def write_batch(
    db: Store, table: Copied, cols: Sequence[str], rows: Sequence[Row], progress: str
) -> int:
    """Insert `rows` (as `read_batch` returned them) and record `progress` for the table, in
    one transaction. Returns how many non-empty vectors the target could not hold (stored as
    NULL: not a whole number of finite float32s, on PostgreSQL)."""
    names = [*table.key, *cols]
    vec_at = names.index(table.vector) if table.vector in names else -1
    sql = (
        f"INSERT INTO {_q(table.name)}({', '.join(_q(c) for c in names)}) "
        f"VALUES ({', '.join('?' for _ in names)})"
    )
    nulled = 0
    params: list[Row] = []
    for row in rows:
        if vec_at >= 0 and row[vec_at] is not None:
            value = db.vector_param(bytes(cast(bytes, row[vec_at])))
            if value is None:
                nulled += 1
            row = (*row[:vec_at], value, *row[vec_at + 1 :])
        params.append(row)
    try:
        with db.atomic() as conn:
            if db.dialect == "postgresql":
                _insert_many_pg(cast("PgConnection", conn), table, names, params)
            else:
                cast(sqlite3.Connection, conn).executemany(sql, params)
            _put_progress(conn, f"table:{table.name}", progress)
    except sqlite3.DatabaseError:
        _name_refused_row(db, table, sql, params)
        raise
    return nulled


class RowRefused(Exception):
    """The target refuses one row of the source (text PostgreSQL cannot hold, a duplicate its
    unique index rejects): a message naming it."""


class _Probed(Exception):
    pass


def _name_refused_row(db: Store, table: Copied, sql: str, rows: Sequence[Row]) -> None:
    """After a batch failed: insert its rows one by one (each in a savepoint, all rolled back)
    and raise RowRefused for the first the target refuses; return when none is (the failure
    was not the rows': a lost connection, a full disk)."""
    refused: tuple[Row, sqlite3.Error] | None = None
    try:
        with db.atomic():
            for row in rows:
                try:
                    with db.atomic() as conn:
                        conn.execute(sql, row)
                except sqlite3.DatabaseError as exc:
                    refused = (row, exc)
                    break
            raise _Probed
    except _Probed:
        pass
    except sqlite3.DatabaseError:
        return
    if refused is not None:
        row, error = refused
        key = "/".join(str(v) for v in row[: len(table.key)])
        raise RowRefused(
            f"the target refuses {table.name} {'/'.join(table.key)}={key}: {error}"
        ) from error


def _insert_many_pg(
    conn: PgConnection, table: Copied, names: Sequence[str], rows: Sequence[Row]
) -> None:
    """One INSERT for many rows on psycopg's pipeline (a round trip per batch, not per row);
    PgConnection runs one statement per call. Straight to psycopg, so in its placeholders."""
    import psycopg

    sql = (
        f"INSERT INTO {_q(table.name)}({', '.join(_q(c) for c in names)}) "
        f"VALUES ({', '.join('%s' for _ in names)})"
    )
    try:
        with conn.raw.cursor(binary=True) as cur:
            cur.executemany(sql, rows)
    except psycopg.Error as exc:
        text = str(exc).strip()
        raise sqlite3.DatabaseError(text.splitlines()[0] if text else type(exc).__name__) from exc


def null_vector_rows(db: Store, table: Copied) -> int:
    """Rows of `table` whose vector column is NULL in `db` (0 for a table without vectors)."""
    if table.vector is None or not columns(db, table.name):
        return 0
    row = db.query_one(f"SELECT COUNT(*) FROM {_q(table.name)} WHERE {_q(table.vector)} IS NULL")
    return int(row[0]) if row else 0


# -- the progress record ---------------------------------------------------------------------


def _put_progress(conn: Connection, name: str, value: str) -> None:
    # (On PostgreSQL a PgConnection, which answers the same calls.)
    conn.execute(f"UPDATE {PROGRESS_TABLE} SET value = ? WHERE name = ?", (value, name))


def read_progress(db: Store) -> dict[str, str] | None:
    """The target's progress record; None when no migration is under way in it."""
    if not columns(db, PROGRESS_TABLE):
        return None
    return {str(r[0]): str(r[1]) for r in db.query(f"SELECT name, value FROM {PROGRESS_TABLE}")}


def start_progress(db: Store, record: dict[str, str], clear: Sequence[str]) -> None:
    """Empty the `clear` tables of the target and write a new progress record, atomically."""
    with db.atomic() as conn:
        for table in clear:
            conn.execute(f"DELETE FROM {_q(table)}")
        conn.execute(f"DROP TABLE IF EXISTS {PROGRESS_TABLE}")
        conn.execute(f"CREATE TABLE {PROGRESS_TABLE} (name TEXT PRIMARY KEY, value TEXT NOT NULL)")
        for name, value in record.items():
            conn.execute(f"INSERT INTO {PROGRESS_TABLE}(name, value) VALUES (?, ?)", (name, value))


def put_progress(db: Store, name: str, value: str) -> None:
    with db.atomic() as conn:
        _put_progress(conn, name, value)


def finish_progress(db: Store) -> None:
    """Drop the progress record: the target is now an ordinary database."""
    with db.atomic() as conn:
        conn.execute(f"DROP TABLE IF EXISTS {PROGRESS_TABLE}")


def encode_key(key: Key | None) -> str:
    return json.dumps(None if key is None else list(key))


def decode_key(text: str) -> Key | None:
    value = json.loads(text)
    return None if value is None else tuple(value)


# -- identities ------------------------------------------------------------------------------


def identity_mark(db: Store, table: Copied) -> int:
    """The largest id `table` has handed out (deleted rows' ids included), 0 for none."""
    if not columns(db, table.name):
        return 0
    row = db.query_one(db.ops.identity_high(), (table.name,))
    top = int(row[0]) if row and row[0] is not None else 0
    row = db.query_one(f"SELECT COALESCE(MAX(id), 0) FROM {_q(table.name)}")
    return max(top, int(row[0]) if row else 0)


def raise_identity(db: Store, table: Copied, mark: int) -> None:
    """Make the next id `table` hands out greater than `mark` (and than every id it holds): an
    id a client saw deleted in the source is never given to another row in the target."""
    mark = max(mark, identity_mark(db, table))
    with db.atomic() as conn:
        for statement in db.ops.raise_identity():
            conn.execute(statement, (table.name, mark))


# -- verification ----------------------------------------------------------------------------


def sample_keys(db: Store, table: Copied, stride: int) -> list[Key]:
    """The keys of every `stride`-th row in key order, starting with the first, and the last."""
    if not columns(db, table.name):
        return []
    keys = ", ".join(_q(c) for c in table.key)
    rows = db.query(
        f"SELECT {keys} FROM (SELECT {keys}, ROW_NUMBER() OVER (ORDER BY {keys}) AS rn "
        f"FROM {_q(table.name)}) AS numbered WHERE (rn - 1) % ? = 0 ORDER BY {keys}",
        (stride,),
    )
    out = [tuple(r) for r in rows]
    last = db.query_one(
        f"SELECT {keys} FROM {_q(table.name)} ORDER BY "
        + ", ".join(f"{_q(c)} DESC" for c in table.key)
        + " LIMIT 1"
    )
    if last is not None and (not out or tuple(last) != out[-1]):
        out.append(tuple(last))
    return out


#: Keys looked up per statement by `rows_by_keys`.
LOOKUP_CHUNK = 200


def rows_by_keys(
    db: Store, table: Copied, cols: Sequence[str], keys: Sequence[Key]
) -> dict[Key, Row]:
    """{key: the row's `cols`} of the rows of `table` with these keys (absent keys omitted)."""
    n = len(table.key)
    select = ", ".join(_q(c) for c in (*table.key, *cols))
    found: dict[Key, Row] = {}
    for start in range(0, len(keys), LOOKUP_CHUNK):
        chunk = keys[start : start + LOOKUP_CHUNK]
        if n == 1:
            where = f"{_q(table.key[0])} IN ({', '.join('?' for _ in chunk)})"
        else:
            values = ", ".join(_key_params(table) for _ in chunk)
            where = f"{_key_expr(table)} IN (VALUES {values})"
        params = [v for key in chunk for v in key]
        for r in db.query(f"SELECT {select} FROM {_q(table.name)} WHERE {where}", params):
            row = tuple(r)
            found[row[:n]] = row[n:]
    return found
