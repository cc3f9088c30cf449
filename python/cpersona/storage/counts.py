"""Row counts per table, for the metrics' scrape-time gauges and the restore's emptiness test."""

from __future__ import annotations

from cpersona.storage.db import quote_identifier
from cpersona.storage.interface import Store

#: The tables whose rows are the user's data: a database holding any is not empty.
DATA_TABLES = ("memories", "episodes", "profiles", "pending_memory_tasks")
#: What the `cpersona_table_rows` gauge reports: the data, and the vector log's backlog.
COUNTED_TABLES = (*DATA_TABLES, "vector_log")


def table_rows(db: Store) -> dict[str, int]:
    """`COUNT(*)` of each counted table, read in one snapshot."""
    conn = db.reader()
    # One snapshot for all of them (unless this thread's reader is already inside one).
    own = not conn.in_transaction
    if own:
        conn.execute("BEGIN")
    try:
        counts = {}
        for table in COUNTED_TABLES:
            sql = f"SELECT COUNT(*) FROM {quote_identifier(table)}"
            counts[table] = int(conn.execute(sql).fetchone()[0])
        return counts
    finally:
        if own:
            conn.execute("COMMIT")


def memory_count(db: Store) -> int:
    """`COUNT(*)` of memories (the start-up banner's note on index files still to build)."""
    row = db.query_one("SELECT count(*) FROM memories")
    return 0 if row is None else int(row[0])
