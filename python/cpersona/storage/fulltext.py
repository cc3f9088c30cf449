"""SQL behind the full-text index: its change log and the rows it indexes (docs/fts-index.md)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from cpersona.storage.change_log import ChangeLog
from cpersona.storage.db import id_batches
from cpersona.storage.embeddings import ScopedRow
from cpersona.storage.embeddings import index_identity as _index_identity
from cpersona.storage.interface import Row, Store
from cpersona.storage.rows import EpisodeRow, MemoryRow, projection
from cpersona.timerange import row_time

TABLES = ("memories", "episodes")


def _select(db: Store, table: str) -> str:
    # created_at as Unix seconds, as the vector index keys it (storage/embeddings.py).
    key = db.ops.created_key()
    if _check(table) == "memories":
        return (
            f"SELECT id, {key}, agent_id, project_id, channel, {db.ops.source_id()}, "
            "timestamp, created_at, content FROM memories"
        )
    return (
        f"SELECT id, {key}, agent_id, project_id, channel, NULL, start_time, created_at, "
        "summary, keywords FROM episodes"
    )


#: The columns each table's FTS5 table indexes, in its column order (storage/schema.py).
FTS_COLUMNS = {"memories": ("content",), "episodes": ("summary", "keywords")}
_LOG = ChangeLog("fts_log", "full-text")
# The log's reads and its trimming (storage/change_log.py), on `fts_log`.
max_seq = _LOG.max_seq
changes_since = _LOG.changes_since
trim_log = _LOG.trim
trimmed_upto = _LOG.trimmed_upto


@dataclass(frozen=True, slots=True)
class FtsRow(ScopedRow):
    """What the full-text index stores of one row: the scope and the FTS5 columns."""

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


def _row(r: Row | tuple[object, ...]) -> FtsRow:
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


def index_identity(db: Store) -> bytes:
    """The identity a full-text index file records (storage/embeddings.py `index_identity`)."""
    return _index_identity(db, "fts_log")


def rows_by_id(db: Store, table: str, ids: Sequence[int]) -> dict[int, FtsRow]:
    """The current rows among `ids` (a row that is gone is absent)."""
    found: dict[int, FtsRow] = {}
    for batch, marks in id_batches(ids):
        for r in db.reader().execute(f"{_select(db, table)} WHERE id IN ({marks})", batch):
            row = _row(r)
            found[row.id] = row
    return found


def row_count(db: Store, table: str) -> int:
    row = db.query_one(f"SELECT COUNT(*) FROM {_check(table)}")
    return int(row[0]) if row else 0


def iter_rows(db: Store, table: str) -> Iterator[FtsRow]:
    """Every row of `table`, by id."""
    cur = db.reader().execute(f"{_select(db, table)} ORDER BY id")
    while batch := cur.fetchmany(4096):
        for r in batch:
            yield _row(r)


def has_fts5_tables(db: Store) -> bool:
    """Whether the FTS5 tables exist (the index answers only where FTS5 would)."""
    exists = db.ops.table_exists()
    row = db.query_one(
        f"SELECT COUNT(*) FROM ({exists} UNION ALL {exists}) AS t",
        ("memories_fts", "episodes_fts"),
    )
    return bool(row and int(row[0]) == 2)
