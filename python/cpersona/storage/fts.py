"""SQL behind the full-text index: its change log and the rows it indexes (docs/fts-index.md)."""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from cpersona.storage.change_log import ChangeLog, Changes
from cpersona.storage.db import Database
from cpersona.storage.rows import EpisodeRow, MemoryRow, projection
from cpersona.storage.vectors import db_uid
from cpersona.timerange import row_time

TABLES = ("memories", "episodes")
# created_at as Unix seconds, as the vector index keys it (storage/vectors.py).
_KEY = "COALESCE(CAST(strftime('%s', created_at) AS INTEGER), 0)"
# The same on PostgreSQL, where strftime() is a plpgsql function with SQLite's reading of any
# time string (storage/pg/compat.py) and costs ~0.1 ms a row: the stamps cpersona writes,
# `YYYY-MM-DD HH:MM:SS` with fields in range, are computed natively as SQLite computes them
# (its Julian-day arithmetic is linear in the day, so day 30 of February is March 1st);
# anything else still goes through strftime().
_CANONICAL = (
    "'^[1-9][0-9]{3}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01]) ([01][0-9]|2[0-3]):[0-5][0-9]"
    ":[0-5][0-9]$'"
)
_KEY_POSTGRESQL = (  # PostgreSQL's own syntax (`::int`): only ever run there
    f"CASE WHEN created_at ~ {_CANONICAL} THEN "
    "extract(epoch FROM make_date(substr(created_at, 1, 4)::int, "
    "substr(created_at, 6, 2)::int, 1))::bigint "
    "+ (substr(created_at, 9, 2)::int - 1) * 86400 + substr(created_at, 12, 2)::int * 3600 "
    "+ substr(created_at, 15, 2)::int * 60 + substr(created_at, 18, 2)::int"
    f" ELSE {_KEY} END"
)


def _select(db: Database, table: str) -> str:
    key = _KEY_POSTGRESQL if db.dialect == "postgresql" else _KEY
    if _check(table) == "memories":
        return (
            f"SELECT id, {key}, agent_id, project_id, channel, "
            "CASE WHEN json_valid(source) THEN CAST(json_extract(source, '$.id') AS TEXT) END, "
            "timestamp, created_at, content FROM memories"
        )
    return (
        f"SELECT id, {key}, agent_id, project_id, channel, NULL, start_time, created_at, "
        "summary, keywords FROM episodes"
    )


#: The columns each table's FTS5 table indexes, in its column order (storage/schema.py).
FTS_COLUMNS = {"memories": ("content",), "episodes": ("summary", "keywords")}
_LOG = ChangeLog("fts_log")


@dataclass(frozen=True, slots=True)
class FtsRow:
    """What the full-text index stores of one row: the FTS5 columns and the scope."""

    id: int
    key: int
    agent_id: str
    project_id: str
    channel: str
    source_id: str | None
    columns: tuple[str, ...]
    #: The row's instant key (cpersona.timerange.row_time).
    time: int


# A projection of either table's row (storage/rows.py); the rest is computed by `_select`.
for _row_type in (MemoryRow, EpisodeRow):
    projection(FtsRow, _row_type, extra=("key", "source_id", "columns", "time"))


def _check(table: str) -> str:
    if table not in TABLES:
        raise ValueError(f"no full-text index for table {table!r}")
    return table


def _row(r: sqlite3.Row | tuple[object, ...]) -> FtsRow:
    # A NULL column is indexed as no text, as FTS5 indexes it.
    values = tuple(r)
    cols = tuple("" if c is None else str(c) for c in values[8:])
    return FtsRow(
        int(r[0]),  # type: ignore[arg-type]
        int(r[1]),  # type: ignore[arg-type]
        str(r[2]),
        str(r[3]),
        str(r[4]),
        None if r[5] is None else str(r[5]),
        cols,
        row_time(values[6], values[7]),
    )


def index_identity(db: Database) -> bytes:
    """The 16 bytes an index file records as its database's identity (`db_uid`).

    On SQLite, `cpersona_meta.db_uid`: a copied file is the same database. On PostgreSQL also
    the object id of `fts_log`, which every restore from a dump (`pg_restore`, a new database,
    `--clean`) gives anew: a file made before the restore is then foreign and rebuilt at once,
    instead of only when its `applied_seq` is ahead of the restored log.
    """
    uid = db_uid(db)
    if db.dialect != "postgresql":
        return uid
    row = db.query_one("SELECT CAST(CAST('fts_log' AS regclass) AS oid)")
    oid = int(row[0]) if row else 0
    return hashlib.sha256(uid + b":" + str(oid).encode("ascii")).digest()[:16]


def max_seq(db: Database) -> int:
    """The largest `fts_log.seq` ever written (trimmed entries included)."""
    return _LOG.max_seq(db)


def changes_since(db: Database, table: str, seq: int) -> Changes:
    """Distinct row ids of `table` logged after `seq`, oldest change first, and the log's max."""
    return _LOG.changes_since(db, _check(table), seq)


def rows_by_id(db: Database, table: str, ids: Sequence[int]) -> dict[int, FtsRow]:
    """The current rows among `ids` (a row that is gone is absent)."""
    found: dict[int, FtsRow] = {}
    for start in range(0, len(ids), 500):
        batch = list(ids[start : start + 500])
        marks = ",".join("?" * len(batch))
        for r in db.reader().execute(f"{_select(db, table)} WHERE id IN ({marks})", batch):
            row = _row(r)
            found[row.id] = row
    return found


def row_count(db: Database, table: str) -> int:
    row = db.query_one(f"SELECT COUNT(*) FROM {_check(table)}")
    return int(row[0]) if row else 0


def iter_rows(db: Database, table: str) -> Iterator[FtsRow]:
    """Every row of `table`, by id."""
    cur = db.reader().execute(f"{_select(db, table)} ORDER BY id")
    while batch := cur.fetchmany(4096):
        for r in batch:
            yield _row(r)


def trim_log(db: Database, table: str, upto: int) -> int:
    """Forget applied log entries of `table`, remembering how far (storage/change_log.py)."""
    return _LOG.trim(db, _check(table), upto)


def trimmed_upto(db: Database, table: str) -> int:
    """The seq up to which `table`'s log entries were trimmed (0 = never)."""
    return _LOG.trimmed_upto(db, _check(table))


def has_fts5_tables(db: Database) -> bool:
    """Whether the FTS5 tables exist (the index answers only where FTS5 would)."""
    row = db.query_one(
        "SELECT COUNT(*) FROM sqlite_master WHERE name IN ('memories_fts', 'episodes_fts')"
    )
    return bool(row and int(row[0]) == 2)
