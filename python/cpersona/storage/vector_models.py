"""Which model made each table's vectors, and the staging area of a model conversion.

`cpersona_vector_model` holds one row per vector table (`memories`, `episodes`): the name of
the provider whose vectors the table's `embedding` column holds. It is the authority recall
and every write consult (the calibration sidecar's `embedding_model` only says what the
calibration was measured on). A conversion (`cpersona reembed`) is one row of
`cpersona_reembed` per table plus the new vectors staged in `cpersona_reembed_vectors`; the
`embedding` column keeps serving the old vectors until `cut_over` swaps them in one
transaction. Triggers drop a staged vector when its row's text changes or the row goes, so a
staged vector always belongs to the row's current text, whoever wrote (a 2.5.x server too).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from cpersona.storage.db import embedding_param
from cpersona.storage.error_kinds import translating
from cpersona.storage.interface import Connection, Store
from cpersona.storage.ops import ops_of
from cpersona.storage.pg.snapshot_reads import remembered

TABLES = ("memories", "episodes")
#: The embedded text of each table.
TEXT_COLUMN = {"memories": "content", "episodes": "summary"}

Conn = Connection

DDL = (
    """CREATE TABLE IF NOT EXISTS cpersona_vector_model (
    tbl         TEXT PRIMARY KEY,
    model       TEXT NOT NULL,
    dim         INTEGER,
    how         TEXT NOT NULL,
    recorded_at TEXT NOT NULL DEFAULT (datetime('now'))
)""",
    """CREATE TABLE IF NOT EXISTS cpersona_reembed (
    tbl        TEXT PRIMARY KEY,
    model      TEXT NOT NULL,
    phase      TEXT NOT NULL DEFAULT 'staging',
    started_at TEXT NOT NULL DEFAULT (datetime('now'))
)""",
    """CREATE TABLE IF NOT EXISTS cpersona_reembed_vectors (
    tbl       TEXT NOT NULL,
    row_id    INTEGER NOT NULL,
    embedding BLOB NOT NULL,
    PRIMARY KEY (tbl, row_id)
) WITHOUT ROWID""",
)


def triggers() -> tuple[str, ...]:
    out = []
    for table, column in TEXT_COLUMN.items():
        drop = f"DELETE FROM cpersona_reembed_vectors WHERE tbl = '{table}' AND row_id = old.id;"
        out += [
            f"""CREATE TRIGGER IF NOT EXISTS cpersona_reembed_{table}_au
AFTER UPDATE OF id, {column} ON {table} BEGIN
    {drop}
END""",
            f"""CREATE TRIGGER IF NOT EXISTS cpersona_reembed_{table}_ad
AFTER DELETE ON {table} BEGIN
    {drop}
END""",
        ]
    return tuple(out)


@dataclass(frozen=True, slots=True)
class Recorded:
    """The model of one table's vectors and how cpersona learned it."""

    model: str
    dim: int | None
    how: str  # written | probed | sidecar | unknown | reembed


@dataclass(frozen=True, slots=True)
class Conversion:
    """A conversion of one table, begun by `cpersona reembed` and not finished."""

    table: str
    model: str
    phase: str  # staging | finishing
    started_at: str


def _check(table: str) -> str:
    if table not in TABLES:
        raise ValueError(f"no vectors in table {table!r}")
    return table


# -- the record ------------------------------------------------------------------------------


def _present(conn: Conn) -> bool:
    """Whether the tables exist (a read-only look at a database no cpersona of this version
    has opened yet finds none: nothing is recorded or converting there)."""
    return conn.execute(ops_of(conn).table_exists(), ("cpersona_reembed",)).fetchone() is not None


def recorded(conn: Conn) -> dict[str, Recorded]:
    """{table: Recorded} of every table with a record."""
    if not _present(conn):
        return {}
    rows = conn.execute("SELECT tbl, model, dim, how FROM cpersona_vector_model").fetchall()
    return {r[0]: Recorded(r[1], r[2], r[3]) for r in rows}


def record(conn: Conn, table: str, model: str, dim: int | None, how: str) -> None:
    conn.execute(
        "INSERT INTO cpersona_vector_model(tbl, model, dim, how) VALUES (?, ?, ?, ?) "
        "ON CONFLICT(tbl) DO UPDATE SET model = excluded.model, dim = excluded.dim, "
        f"how = excluded.how, recorded_at = {ops_of(conn).now()}",
        (_check(table), model, dim, how),
    )


def claim(conn: Conn, table: str, model: str, dim: int | None) -> str:
    """Inside a write transaction: the model whose vectors `table` takes now.

    A table without a record, or whose every vector is gone, is claimed for `model`;
    otherwise the recorded model stands and the caller writes a vector only if it matches.
    """
    row = conn.execute(
        "SELECT model FROM cpersona_vector_model WHERE tbl = ?", (_check(table),)
    ).fetchone()
    if row is not None and (row[0] == model or has_vectors(conn, table)):
        return str(row[0])
    if row is None and has_vectors(conn, table):
        # Vectors nobody identified (a 2.5.x writer, or a start that could not probe):
        # never let a new vector of one model join them under a record that says so.
        return ""
    record(conn, table, model, dim, "written")
    return model


def has_vectors(conn: Conn, table: str) -> bool:
    return (
        conn.execute(
            f"SELECT 1 FROM {_check(table)} WHERE embedding IS NOT NULL LIMIT 1"
        ).fetchone()
        is not None
    )


def sample_texts(conn: Conn, table: str, n: int) -> list[tuple[str, bytes]]:
    """(text, stored BLOB) of up to `n` embedded rows with text, newest first."""
    column = TEXT_COLUMN[_check(table)]
    rows = conn.execute(
        f"SELECT {column}, embedding FROM {table} WHERE embedding IS NOT NULL "
        f"AND {column} != '' ORDER BY id DESC LIMIT ?",
        (n,),
    ).fetchall()
    return [(str(r[0]), bytes(r[1])) for r in rows]


# -- conversions -----------------------------------------------------------------------------


def conversions(conn: Conn) -> dict[str, Conversion]:
    if not _present(conn):
        return {}
    rows = conn.execute("SELECT tbl, model, phase, started_at FROM cpersona_reembed").fetchall()
    return {r[0]: Conversion(r[0], r[1], r[2], r[3]) for r in rows}


def begin(conn: Conn, table: str, model: str) -> Conversion:
    """Start converting `table` to `model`, or resume the conversion already begun.

    A conversion begun towards another model is dropped with its staged vectors.
    """
    found = conversions(conn).get(_check(table))
    if found is not None and found.model == model:
        return found
    drop(conn, table)
    conn.execute("INSERT INTO cpersona_reembed(tbl, model) VALUES (?, ?)", (table, model))
    return conversions(conn)[table]


def drop(conn: Conn, table: str) -> None:
    """Abandon `table`'s conversion and its staged vectors (the old vectors never moved)."""
    conn.execute("DELETE FROM cpersona_reembed_vectors WHERE tbl = ?", (_check(table),))
    conn.execute("DELETE FROM cpersona_reembed WHERE tbl = ?", (table,))


def set_phase(conn: Conn, table: str, phase: str) -> None:
    conn.execute("UPDATE cpersona_reembed SET phase = ? WHERE tbl = ?", (phase, _check(table)))


def finish(conn: Conn, table: str) -> None:
    conn.execute("DELETE FROM cpersona_reembed WHERE tbl = ?", (_check(table),))


def progress(conn: Conn, table: str) -> tuple[int, int]:
    """(rows with a staged vector, rows to convert) of `table`."""
    column = TEXT_COLUMN[_check(table)]
    total = conn.execute(f"SELECT COUNT(*) FROM {table} WHERE {column} != ''").fetchone()[0]
    done = conn.execute(
        f"SELECT COUNT(*) FROM cpersona_reembed_vectors s JOIN {table} t ON t.id = s.row_id "
        "WHERE s.tbl = ?",
        (table,),
    ).fetchone()[0]
    return int(done), int(total)


def unstaged(conn: Conn, table: str, limit: int) -> list[tuple[int, str]]:
    """(id, text) of rows that have text and no staged vector yet, lowest id first."""
    column = TEXT_COLUMN[_check(table)]
    rows = conn.execute(
        f"SELECT id, {column} FROM {table} WHERE {column} != '' AND id NOT IN "
        "(SELECT row_id FROM cpersona_reembed_vectors WHERE tbl = ?) ORDER BY id LIMIT ?",
        (table, limit),
    ).fetchall()
    return [(int(r[0]), str(r[1])) for r in rows]


def stage(conn: Conn, table: str, rows: Sequence[tuple[int, str, bytes]]) -> int:
    """Keep the new vectors of (id, text it was computed from, BLOB); a row whose text
    changed since it was read is skipped (the next batch reads it again)."""
    column = TEXT_COLUMN[_check(table)]
    staged = 0
    for row_id, text, blob in rows:
        staged += conn.execute(
            "INSERT INTO cpersona_reembed_vectors(tbl, row_id, embedding) "
            f"SELECT ?, id, ? FROM {table} WHERE id = ? AND {column} = ? "
            "ON CONFLICT (tbl, row_id) DO UPDATE SET embedding = excluded.embedding",
            (table, embedding_param(conn, blob), row_id, text),
        ).rowcount
    return staged


def cut_over(conn: Conn, table: str, model: str, dim: int | None) -> int:
    """Inside one write transaction: swap every staged vector into `table` and record `model`.

    The caller has checked that no row with text is unstaged (`unstaged(...)` is empty in the
    same transaction). A row without text loses any old vector: no vector of the old model
    may stay behind under the new record. Returns the rows swapped.
    """
    _check(table)
    swapped = conn.execute(
        f"UPDATE {table} SET embedding = s.embedding FROM cpersona_reembed_vectors s "
        f"WHERE s.tbl = ? AND s.row_id = {table}.id",
        (table,),
    ).rowcount
    conn.execute(
        f"UPDATE {table} SET embedding = NULL WHERE embedding IS NOT NULL AND id NOT IN "
        "(SELECT row_id FROM cpersona_reembed_vectors WHERE tbl = ?)",
        (table,),
    )
    conn.execute("DELETE FROM cpersona_reembed_vectors WHERE tbl = ?", (table,))
    record(conn, table, model, dim, "reembed")
    set_phase(conn, table, "finishing")
    return int(swapped)


#: Stores whose tables were seen: the tables of a migrated database never go away, so the
#: catalogue is asked once per store, not twice per recall (two of a PostgreSQL recall's
#: round trips each time, issue 19).
_seen: weakref.WeakSet[Store] = weakref.WeakSet()

#: Both halves of `read` in one statement, so one snapshot without a BEGIN and a COMMIT.
_BOTH = (
    "SELECT 'r', tbl, model, dim, how, NULL FROM cpersona_vector_model UNION ALL "
    "SELECT 'c', tbl, model, NULL, phase, started_at FROM cpersona_reembed"
)


def read(db: Store) -> tuple[dict[str, Recorded], dict[str, Conversion]]:
    """The record and the open conversions, read in one snapshot (one statement: every recall
    asks, through the model router)."""
    conn = db.reader()
    if db not in _seen:
        if not _present(conn):
            return {}, {}
        _seen.add(db)
    record: dict[str, Recorded] = {}
    open_: dict[str, Conversion] = {}
    # Inside a read snapshot asked once, with its BEGIN (recall asks before the snapshot, to
    # embed the query, and inside it, to check the model still holds).
    for kind, table, model, dim, how, started_at in remembered(conn, "vector_models", _BOTH):
        if kind == "r":
            record[table] = Recorded(model, dim, how)
        else:
            open_[table] = Conversion(table, model, how, started_at)
    return record, open_


def fill_vector(conn: Conn, table: str, row_id: int, text: str, blob: bytes) -> int:
    """Give a row stored without a vector its vector, if its text is still `text`."""
    column = TEXT_COLUMN[_check(table)]
    return conn.execute(
        f"UPDATE {table} SET embedding = ? WHERE id = ? AND embedding IS NULL AND {column} = ?",
        (embedding_param(conn, blob), row_id, text),
    ).rowcount


# -- the services' calls: each takes the Database and opens what it needs ---------------------

#: Computes new vectors (id, text, BLOB) for (id, text) rows; no SQL (called in a transaction).
Embed = Callable[[str, list[tuple[int, str]]], Sequence[tuple[int, str, bytes]]]


@translating
def table_has_vectors(db: Store, table: str) -> bool:
    return has_vectors(db.reader(), table)


@translating
def sample(db: Store, table: str, n: int) -> list[tuple[str, bytes]]:
    return sample_texts(db.reader(), table, n)


@translating
def record_if_absent(db: Store, table: str, found: Recorded) -> bool:
    """Record `found` for `table` unless another process recorded one first; whether it did."""
    with db.atomic() as conn:
        if table in recorded(conn):
            return False
        record(conn, table, found.model, found.dim, found.how)
        return True


@translating
def table_progress(db: Store, table: str) -> tuple[int, int]:
    return progress(db.reader(), table)


@translating
def unstaged_rows(db: Store, table: str, limit: int) -> list[tuple[int, str]]:
    return unstaged(db.reader(), table, limit)


@translating
def open_conversions(db: Store) -> dict[str, Conversion]:
    return conversions(db.reader())


@translating
def begin_all(db: Store, tables: Sequence[str], model: str) -> None:
    """Begin (or resume) the conversion of every table in `tables`, in one transaction."""
    with db.atomic() as conn:
        for table in tables:
            begin(conn, table, model)


@translating
def drop_stale(db: Store, model: str) -> list[Conversion]:
    """Drop every conversion still staging towards another model than `model`; those dropped."""
    with db.atomic() as conn:
        stale = [
            conv
            for conv in conversions(conn).values()
            if conv.model != model and conv.phase == "staging"
        ]
        for conv in stale:
            drop(conn, conv.table)
    return stale


@translating
def stage_rows(db: Store, table: str, rows: Sequence[tuple[int, str, bytes]]) -> int:
    with db.atomic() as conn:
        return stage(conn, table, rows)


@translating
def cut_over_all(
    db: Store,
    tables: Sequence[str],
    model: str,
    dim: int | None,
    embed_rest: Embed | None = None,
    batch: int = 64,
    swapping: Callable[[], None] | None = None,
) -> dict[str, int] | None:
    """One transaction: when no row of `tables` is left unstaged (after `embed_rest` staged
    the remainder under the write lock, when given), swap every staged vector in and record
    `model`; {table: rows swapped}, or None when rows were left (nothing changed).
    `swapping` is called inside the transaction just before the swap (progress output)."""
    with db.atomic() as conn:
        limit = 1_000_000 if embed_rest is not None else 1
        left = {t: unstaged(conn, t, limit) for t in tables}
        if embed_rest is not None:
            for table, rows in left.items():
                for start in range(0, len(rows), batch):
                    stage(conn, table, embed_rest(table, rows[start : start + batch]))
            left = {t: unstaged(conn, t, 1) for t in tables}
        if any(left.values()):
            return None
        if swapping is not None:
            swapping()
        return {table: cut_over(conn, table, model, dim) for table in tables}


@translating
def finish_all(db: Store, tables: Sequence[str]) -> None:
    with db.atomic() as conn:
        for table in tables:
            finish(conn, table)
