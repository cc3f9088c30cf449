"""SQL behind the vector index: the change log, row reads, and the window of the no-index path."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from cpersona.storage.change_log import LOGS, ChangeLog
from cpersona.storage.db import id_batches
from cpersona.storage.filters import scope_where
from cpersona.storage.interface import Row, Store
from cpersona.storage.rows import EpisodeRow, MemoryRow, projection
from cpersona.storage.scan_request import Scope
from cpersona.timerange import first_in_span, row_time

_TABLES = ("memories", "episodes")
# The window order is `ops.created_key()`: created_at as Unix seconds, a non-canonical stamp
# sorting as the oldest (cpersona writes canonical `datetime('now')` stamps everywhere).


def _source_id(db: Store, table: str) -> str:
    return db.ops.source_id() if table == "memories" else "NULL"


#: The stamp naming a row's instant (cpersona.timerange), before its created_at.
STAMP = {"memories": "timestamp", "episodes": "start_time"}


@dataclass(frozen=True, slots=True)
class ScopedRow:
    """What both derived indexes store of a row before their own part: its id, its window
    key (created_at as Unix seconds) and its scope."""

    id: int
    key: int
    agent_id: str
    project_id: str
    channel: str
    source_id: str | None


@dataclass(frozen=True, slots=True)
class IndexRow(ScopedRow):
    """What the vector index stores of one embedded row."""

    embedding: bytes
    #: The row's instant key (cpersona.timerange.row_time).
    time: int


# A projection of either table's row (storage/rows.py); the rest is computed by `_select`.
for _row_type in (MemoryRow, EpisodeRow):
    projection(IndexRow, _row_type, extra=("key", "source_id", "time"))


def _check(table: str) -> str:
    if table not in _TABLES:
        raise ValueError(f"no vector index for table {table!r}")
    return table


def _select(db: Store, table: str) -> str:
    return (
        f"SELECT id, {db.ops.created_key()} AS key, agent_id, project_id, channel, "
        f"{_source_id(db, table)} AS source_id, embedding, {STAMP[table]} AS stamp, created_at "
        f"FROM {table}"
    )


def _row(r: Row) -> IndexRow:
    return IndexRow(
        r["id"],
        r["key"],
        r["agent_id"],
        r["project_id"],
        r["channel"],
        r["source_id"],
        bytes(r["embedding"]),
        row_time(r["stamp"], r["created_at"]),
    )


def db_uid(db: Store) -> bytes:
    row = db.query_one("SELECT value FROM cpersona_meta WHERE key = 'db_uid'")
    if row is None:
        raise RuntimeError("database has no cpersona_meta.db_uid; was it migrated?")
    return bytes(row[0])


def index_identity(db: Store, log: str) -> bytes:
    """The 16 bytes an index file following `log` records as its database's identity
    (`db_uid`).

    On SQLite, `cpersona_meta.db_uid`: a copied file is the same database. On PostgreSQL also
    the object id of the log, which every restore from a dump (`pg_restore`, a new database,
    `--clean`) gives anew: a file made before the restore is then foreign and rebuilt at once,
    instead of only when its `applied_seq` is ahead of the restored log.
    """
    uid = db_uid(db)
    if db.dialect != "postgresql":
        return uid
    if log not in LOGS:
        raise ValueError(f"no change log {log!r}")
    row = db.query_one(f"SELECT CAST(CAST('{log}' AS regclass) AS oid)")
    oid = int(row[0]) if row else 0
    return hashlib.sha256(uid + b":" + str(oid).encode("ascii")).digest()[:16]


_LOG = ChangeLog("vector_log", "vector")
# The log's reads and its trimming (storage/change_log.py), on `vector_log`.
max_seq = _LOG.max_seq
changes_since = _LOG.changes_since
trim_log = _LOG.trim
trimmed_upto = _LOG.trimmed_upto


def rows_by_id(db: Store, table: str, ids: Sequence[int]) -> dict[int, IndexRow]:
    """Current embedded rows among `ids` (a row that is gone or unembedded is absent)."""
    found: dict[int, IndexRow] = {}
    for batch, marks in id_batches(ids):
        for r in db.query(
            f"{_select(db, _check(table))} WHERE id IN ({marks}) AND embedding IS NOT NULL",
            batch,
        ):
            found[r["id"]] = _row(r)
    return found


def embedded_shape(db: Store, table: str) -> tuple[int, int | None]:
    """(embedded rows, modal width in floats) of a table; width None when no BLOB is a vector
    (a BLOB that is empty or not whole floats is counted but never sets the width)."""
    rows = db.query(
        f"SELECT {db.ops.byte_length('embedding')} AS len, COUNT(*) AS n FROM {_check(table)} "
        "WHERE embedding IS NOT NULL GROUP BY len"
    )
    total = sum(int(r["n"]) for r in rows)
    widths = [(int(r["n"]), -int(r["len"])) for r in rows if r["len"] and r["len"] % 4 == 0]
    return total, (-max(widths)[1] // 4 if widths else None)


def embedded_more_than(db: Store, table: str, n: int) -> bool:
    """Whether `table` holds more than `n` embedded rows, reading about `n` rows (a count of
    all, `embedded_shape`, reads every row: 0.4 s at 100,000 rows of 384 floats)."""
    row = db.query_one(
        f"SELECT 1 FROM {_check(table)} WHERE embedding IS NOT NULL LIMIT 1 OFFSET ?", (n,)
    )
    return row is not None


#: Rows read by id in one statement by `iter_rows` on SQLite (below its 32,766 variables).
ROW_BATCH = 1024


def iter_rows(db: Store, table: str) -> Iterator[IndexRow]:
    """Every embedded row, newest first by (created_at, id)."""
    sql = f"{_select(db, _check(table))} WHERE embedding IS NOT NULL ORDER BY key DESC, id DESC"
    if db.dialect == "postgresql":  # a server-side cursor: the result is never held whole
        from cpersona.storage.pg.vectors import stream_rows

        for rows in stream_rows(db, sql):  # type: ignore[arg-type]
            yield from map(_row, rows)
        return
    # SQLite sorts the whole result before the first row when the ORDER BY is on the rows
    # themselves: every vector went through its sorter (a 2.1 s wait of a 7.7 s rebuild at
    # 100,000 rows, spilled to temporary files at 1,000,000). The order is sorted on (key, id)
    # alone and the rows read by id, a batch at a time, in one read transaction: the same
    # snapshot a single statement would have read.
    table = _check(table)
    conn = db.reader()
    # A recall that rebuilds a small file inline already reads in its snapshot.
    began = not conn.in_transaction
    if began:
        conn.execute("BEGIN")
    try:
        ids = [r[0] for r in conn.execute(
            f"SELECT id FROM {table} WHERE embedding IS NOT NULL "
            f"ORDER BY {db.ops.created_key()} DESC, id DESC"
        )]  # fmt: skip
        for at in range(0, len(ids), ROW_BATCH):
            chunk = ids[at : at + ROW_BATCH]
            marks = ",".join("?" * len(chunk))
            found = {r["id"]: r for r in conn.execute(
                f"{_select(db, table)} WHERE id IN ({marks})", chunk
            )}  # fmt: skip
            for row_id in chunk:
                yield _row(found[row_id])
    finally:
        if began:
            conn.execute("COMMIT")


def window_ids(
    db: Store,
    table: str,
    scope: Scope,
    limit: int,
) -> list[int]:
    """The spec's window as plain SQL (retrieval.md §4.2): ids of the in-scope embedded rows,
    newest first by (created_at DESC, id DESC), positions [0, limit). With `scope.span`, only
    rows whose instant it admits take positions (read in that order until `limit` are found).

    The order of the no-index path, read without touching a BLOB (`blobs` fetches them): sorting
    `(id, embedding)` pairs made SQLite carry every in-scope BLOB through its sorter, and
    `embedding IS NOT NULL` made it visit every row of the agent, when the agent's index and
    the partial index of unembedded rows answer both (docs/notes/performance-notes.md).
    """
    where, params = scope_where(scope.agent_id, scope.project, scope.channel)
    source_prefix, span = scope.source_prefix, scope.span
    where.append(f"id NOT IN (SELECT id FROM {_check(table)} WHERE embedding IS NULL)")
    if source_prefix:
        where.append(f"substr({_source_id(db, table)}, 1, ?) = ?")
        params.extend([len(source_prefix), source_prefix])
    cols = "id" if span is None else f"id, {STAMP[table]}, created_at"
    key = db.ops.created_key()
    sql = f"SELECT {cols} FROM {table} WHERE {' AND '.join(where)} ORDER BY {key} DESC, id DESC"
    if span is None:
        return [int(r[0]) for r in db.reader().execute(sql + " LIMIT ?", [*params, limit])]
    return [int(r[0]) for r in first_in_span(db.reader().execute(sql, params), span, 1, 2, limit)]


def blobs(db: Store, table: str, ids: Sequence[int]) -> dict[int, bytes]:
    """The embedding BLOB of each of `ids` that has one (batches of 500)."""
    found: dict[int, bytes] = {}
    for batch, marks in id_batches(ids):
        for r in db.reader().execute(
            f"SELECT id, embedding FROM {_check(table)} WHERE id IN ({marks}) "
            "AND embedding IS NOT NULL",
            batch,
        ):
            found[int(r[0])] = bytes(r[1])
    return found


@contextmanager
def snapshot(db: Store) -> Iterator[None]:
    """`db.snapshot()`: several statements see one state of the database (the caller's
    snapshot when one is already open)."""
    with db.snapshot():
        yield


def source_ids_with_prefix(db: Store, table: str, agent_id: str, prefix: str) -> list[str]:
    """Distinct `source.id` texts of one agent's rows that start with `prefix` (case-sensitive)."""
    if _check(table) != "memories":
        return []
    rows = db.query(
        f"SELECT DISTINCT {db.ops.source_id()} FROM memories WHERE agent_id = ?", (agent_id,)
    )
    return [r[0] for r in rows if isinstance(r[0], str) and r[0].startswith(prefix)]
