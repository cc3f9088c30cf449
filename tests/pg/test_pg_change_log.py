"""The change logs on PostgreSQL, where writers commit out of seq order (issue 19).

Writers no longer take one global lock, so a transaction that took seq 7 may commit after one
that took seq 8. A follower (an index file's `applied_seq`) reads by transaction horizon
(storage/pg/horizons.py); these tests force the orders with real connections of their own
and check that the follower gets every committed row and no aborted one.
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import count
from typing import Any

import psycopg
import pytest
from cpersona.storage import open_database
from cpersona.storage.change_log import ChangeLog
from cpersona.storage.pg import horizons
from cpersona.storage.pg.db import PgDatabase
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

LOG = ChangeLog("fts_log")
_names = count()


@pytest.fixture
def db(pg_url: str) -> Iterator[PgDatabase]:
    database = open_database("", database_url=pg_url, pool_size=4)
    yield database  # type: ignore[misc]
    database.close()


class Follower:
    """An index as the index code follows a log: skip when `max_seq` equals the position,
    otherwise read `changes_since` and take its position."""

    def __init__(self, db: PgDatabase, start: int) -> None:
        self.db, self.position, self.seen = db, start, set[int]()

    def sync(self) -> None:
        if LOG.max_seq(self.db) == self.position:
            return
        changes = LOG.changes_since(self.db, "memories", self.position)
        assert not changes.lost
        self.seen.update(changes.row_ids)
        self.position = changes.max_seq


def writer(url: str) -> psycopg.Connection[Any]:
    return psycopg.connect(url, autocommit=True)


def insert(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute(
        "INSERT INTO memories (agent_id, content, timestamp) VALUES ('a', %s, '') RETURNING id",
        (f"row {next(_names)}",),
    ).fetchone()
    assert row is not None
    return int(row[0])


def seq_of(conn: psycopg.Connection[Any], row_id: int) -> int:
    row = conn.execute(
        "SELECT MIN(seq) FROM fts_log WHERE tbl = 'memories' AND row_id = %s", (row_id,)
    ).fetchone()
    assert row is not None
    return int(row[0])


def test_a_row_committed_after_a_later_seq_is_still_delivered(pg_url: str, db: PgDatabase) -> None:
    follower = Follower(db, LOG.max_seq(db))
    a, b = writer(pg_url), writer(pg_url)
    a.execute("BEGIN")
    row_a = insert(a)  # takes the smaller seq
    b.execute("BEGIN")
    row_b = insert(b)
    b.execute("COMMIT")
    follower.sync()
    assert follower.seen == {row_b}  # the follower has read past A's seq
    a.execute("COMMIT")
    with writer(pg_url) as look:
        assert seq_of(look, row_a) < seq_of(look, row_b)  # really out of seq order
    follower.sync()
    assert follower.seen == {row_a, row_b}
    a.close()
    b.close()


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    plans=st.lists(st.tuples(st.integers(1, 2), st.booleans()), min_size=2, max_size=4),
    data=st.data(),
)
def test_a_follower_misses_no_commit_in_any_interleaving(
    pg_url: str, db: PgDatabase, plans: list[tuple[int, bool]], data: st.DataObject
) -> None:
    """N transactions, each: begin, log k rows, commit or abort, interleaved at random; the
    follower syncs after every step. Every committed row is delivered, no aborted one ever."""
    follower = Follower(db, LOG.max_seq(db))
    steps = data.draw(st.permutations([i for i, (k, _) in enumerate(plans) for _ in range(k + 2)]))
    conns = [writer(pg_url) for _ in plans]
    done = [0] * len(plans)
    rows: list[list[int]] = [[] for _ in plans]
    committed: set[int] = set()
    aborted: set[int] = set()
    try:
        for i in steps:
            k, commits = plans[i]
            step, done[i] = done[i], done[i] + 1
            if step == 0:
                conns[i].execute("BEGIN")
            elif step <= k:
                rows[i].append(insert(conns[i]))
            elif commits:
                conns[i].execute("COMMIT")
                committed.update(rows[i])
            else:
                conns[i].execute("ROLLBACK")
                aborted.update(rows[i])
            follower.sync()
            assert follower.seen <= committed  # nothing uncommitted, nothing aborted
    finally:
        for conn in conns:
            conn.close()
    follower.sync()
    assert follower.seen == committed and not follower.seen & aborted


def test_positions_keep_the_comparisons_the_index_makes(pg_url: str, db: PgDatabase) -> None:
    """A position is never above `max_seq` (that means a file of another history), and
    `max_seq` moves off a position as soon as anything commits, even beside a transaction
    still running below it."""
    first = LOG.changes_since(db, "memories", LOG.max_seq(db)).max_seq
    assert first <= LOG.max_seq(db)
    busy = writer(pg_url)
    busy.execute("BEGIN")
    insert(busy)  # holds the oldest xid: the horizon cannot pass it
    read = LOG.changes_since(db, "memories", first).max_seq
    assert first <= read <= LOG.max_seq(db)
    with writer(pg_url) as other:
        late = insert(other)
    assert LOG.max_seq(db) != read
    changes = LOG.changes_since(db, "memories", read)
    assert changes.row_ids == [late] and changes.max_seq <= LOG.max_seq(db)
    # The horizon never goes back (its code may: a quiet read's 2, then 0 beside `busy`).
    assert horizons.decode(read) == horizons.decode(changes.max_seq)
    busy.execute("ROLLBACK")
    busy.close()


def test_a_file_of_the_release_before_reads_on_by_seq(pg_url: str, db: PgDatabase) -> None:
    """An index file written before pg_0006 holds a seq (below every horizon): it reads the
    entries after that seq, gets a horizon back, and nothing is rebuilt."""
    with writer(pg_url) as conn:
        ids = [insert(conn) for _ in range(3)]
        old_position = seq_of(conn, ids[0])
    assert old_position < horizons.OFFSET <= LOG.max_seq(db)
    changes = LOG.changes_since(db, "memories", old_position)
    assert changes.row_ids == ids[1:] and not changes.lost
    assert changes.max_seq >= horizons.OFFSET


def test_a_trim_keeps_recent_entries_for_the_other_hosts(pg_url: str, db: PgDatabase) -> None:
    start = LOG.max_seq(db)
    with writer(pg_url) as conn:
        ids = [insert(conn) for _ in range(3)]
    ahead = LOG.changes_since(db, "memories", start).max_seq
    assert LOG.trim(db, "memories", ahead) == 0  # written just now: another host may need them
    behind = LOG.changes_since(db, "memories", start)
    assert behind.row_ids == ids and not behind.lost


def test_trim_marks_what_a_follower_behind_it_lost(
    pg_url: str, db: PgDatabase, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(horizons, "RETAIN_SECONDS", 0)
    start = LOG.max_seq(db)
    with writer(pg_url) as conn:
        ids = [insert(conn) for _ in range(3)]
    changes = LOG.changes_since(db, "memories", start)
    assert changes.row_ids == ids
    assert LOG.trim(db, "memories", changes.max_seq) == 3
    assert start < LOG.trimmed_upto(db, "memories") <= changes.max_seq
    mark = LOG.trimmed_upto(db, "memories")
    LOG.trim(db, "memories", start)  # an older position never lowers the mark
    assert LOG.trimmed_upto(db, "memories") == mark
    assert LOG.changes_since(db, "memories", start).lost  # behind the trim: rebuild
    current = LOG.changes_since(db, "memories", changes.max_seq)
    assert not current.lost and current.row_ids == []
    with db.atomic() as conn:
        conn.execute("DELETE FROM memories WHERE id = ?", (ids[0],))
    assert LOG.changes_since(db, "memories", changes.max_seq).row_ids == [ids[0]]
