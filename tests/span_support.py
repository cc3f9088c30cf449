"""Random rows with stamps in many forms and random ranges, for the time-scoped scan properties
(tests/vectors/test_span_scan.py, tests/fts/test_fts_span.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
from cpersona.storage import Database, open_database
from cpersona.timerange import RangeError, TimeRange, parse_range, row_time
from hypothesis import strategies as st

STAMPS = st.sampled_from(
    [
        "2024-03-05T10:00:00+00:00",
        "2024-03-05T10:00:00Z",
        "2024-03-05T12:00:00+02:00",
        "2024-03-05T10:00:00.000001",
        "2024-03-04T23:59:59.999999-00:00",
        "2024-03-06",
        "2024-03-05 09:59:59",
        "2024-03-07T01:00:00+09:00",
        "2023-12-31T23:00:00-05:00",
        "20240305T100000",
        "garbage",
        "",
    ]
)
CREATED = st.sampled_from(
    ["2024-03-05 10:00:00", "2024-03-05 08:00:00", "2024-03-06 00:00:00", "2024-01-01 00:00:00"]
)
BOUNDS = st.sampled_from(
    [
        None,
        "2024-03-05",
        "2024-03-05T10:00:00Z",
        "2024-03-05T10:00:00.000001+00:00",
        "2024-03-06T00:00:00+09:00",
        "2024-03-06",
        "2024-01-01",
    ]
)
ROWS = st.lists(
    st.tuples(
        st.sampled_from(["a", "a", "b"]),
        STAMPS,
        CREATED,
        st.one_of(st.none(), st.lists(st.integers(-2, 2), min_size=4, max_size=4)),
        st.sampled_from(["kubernetes rollout", "rollout plan", "lunch menu", "kubernetes"]),
    ),
    min_size=1,
    max_size=40,
)


def span_of(since: str | None, until: str | None) -> TimeRange | None:
    """The range two drawn bounds name; a reversed pair is swapped, an empty one opened."""
    try:
        return parse_range(since, until)
    except RangeError:
        if since == until:
            return parse_range(since, None)
        return parse_range(until, since)


def load(db: Database, table: str, rows: list[Any]) -> None:
    """Insert drawn rows (agent, stamp, created_at, vector or None, text) into `table`."""
    with db.atomic() as conn:
        for agent, stamp, created, vector, words in rows:
            # Contents are unique per agent (a unique index keeps 2.5.x's dedup).
            text = f"{words} row{conn.execute(f'SELECT COUNT(*) FROM {table}').fetchone()[0]}"
            embedding = None if vector is None else np.asarray(vector, "<f4").tobytes()
            if table == "memories":
                conn.execute(
                    "INSERT INTO memories(agent_id, content, timestamp, created_at, embedding) "
                    "VALUES (?, ?, ?, ?, ?)",
                    (agent, text, stamp, created, embedding),
                )
            else:
                conn.execute(
                    "INSERT INTO episodes(agent_id, summary, start_time, created_at, embedding) "
                    "VALUES (?, ?, ?, ?, ?)",
                    (agent, text, stamp or None, created, embedding),
                )


@contextmanager
def half_synced(
    path: Path, table: str, rows: list[Any], open_index: Callable[[Database, str], Any]
) -> Iterator[tuple[Database, Any]]:
    """A database at `path` holding `rows` and an index on `table` (`open_index(db, table)`)
    that took the first half through a rebuild and has the rest waiting in its log."""
    db = open_database(str(path))
    index = open_index(db, table)
    try:
        load(db, table, rows[: len(rows) // 2])
        index.sync()
        load(db, table, rows[len(rows) // 2 :])
        yield db, index
    finally:
        index.close()
        db.close()


def instants(db: Database, table: str) -> dict[int, int]:
    """Each row's instant key, read as the index files key it."""
    stamp = "timestamp" if table == "memories" else "start_time"
    rows = db.query(f"SELECT id, {stamp}, created_at FROM {table}")
    return {int(r[0]): row_time(r[1], r[2]) for r in rows}
