"""A change log kept by triggers (`vector_log`, `fts_log`): what a derived index file reads to
catch up with the database, and forgets once applied. One implementation for both indexes.

A follower's position is an int it stores (`applied_seq`). On SQLite it is a seq: one writer
at a time, so seqs commit in order and "everything up to the largest seq" is exact. On
PostgreSQL many servers write at once and a transaction that took seq 7 may commit after one
that took seq 8, so the position is a transaction horizon instead (storage/pg/horizons.py):
everything written by a transaction below it was visible to the read that handed it out.
"""

from __future__ import annotations

from dataclasses import dataclass

from cpersona.storage.interface import Connection, Store
from cpersona.storage.pg import horizons

LOGS = ("vector_log", "fts_log")

#: The tables whose changes a log records.
TABLES = ("memories", "episodes")


@dataclass(frozen=True, slots=True)
class Changes:
    row_ids: list[int]
    max_seq: int
    #: Entries after the caller's seq were trimmed (on PostgreSQL, by another host's process,
    #: which applied them to its own index file): replaying cannot bring the caller's index
    #: current; it must be rebuilt.
    lost: bool = False


@dataclass(frozen=True, slots=True)
class ChangeLog:
    """One log table; `index` names, in the error a table it does not log raises, the kind
    of index the log feeds."""

    name: str
    index: str = "derived"

    def __post_init__(self) -> None:
        if self.name not in LOGS:
            raise ValueError(f"no change log {self.name!r}")

    @property
    def _high_water(self) -> str:
        # sqlite_sequence keeps the largest seq ever handed out, so trimming the log never
        # lowers it, and an index file that has applied more than this comes from another
        # point of the database's history (a restored backup).
        return f"SELECT COALESCE((SELECT seq FROM sqlite_sequence WHERE name = '{self.name}'), 0)"

    def _logged(self, table: str) -> str:
        if table not in TABLES:
            raise ValueError(f"no {self.index} index for table {table!r}")
        return table

    def max_seq(self, db: Store) -> int:
        """The largest seq ever written (trimmed entries included); on PostgreSQL the current
        horizon (`horizons.py`): equal to a position a follower was handed only when nothing
        was written since, never below one, and safe to start a rebuild from."""
        if db.dialect != "sqlite":
            return horizons.now(db.reader())
        row = db.query_one(self._high_water)
        return _mark(row[0]) if row else 0

    def changes_since(self, db: Store, table: str, seq: int) -> Changes:
        """Distinct row ids of `table` logged after `seq`, oldest change first, and the
        position to ask from next (on PostgreSQL a horizon: a row id may come again, and
        applying one is idempotent, the index re-reads the row's current state)."""
        table = self._logged(table)
        conn = db.reader()
        if db.dialect != "sqlite":
            return self._changes_in_one_statement(conn, table, seq)
        # One snapshot for every statement, so no change slips between them (the caller's,
        # when this thread's reader is already inside a read transaction: BEGIN would fail).
        own = not conn.in_transaction
        if own:
            conn.execute("BEGIN")
        try:
            top = int(conn.execute(self._high_water).fetchone()[0])
            rows = conn.execute(
                f"SELECT row_id, MIN(seq) AS first FROM {self.name} "
                "WHERE tbl = ? AND seq > ? AND seq <= ? GROUP BY row_id ORDER BY first",
                (table, seq, top),
            ).fetchall()
            # Read in the same snapshot: were entries this read needed deleted before it?
            mark = conn.execute(
                "SELECT value FROM cpersona_meta WHERE key = ?", (f"{self.name}_trimmed_{table}",)
            ).fetchone()
        finally:
            if own:
                conn.execute("COMMIT")
        lost = mark is not None and _mark(mark[0]) > seq
        return Changes([int(r[0]) for r in rows], top, lost)

    def _changes_in_one_statement(self, conn: Connection, table: str, seq: int) -> Changes:
        """`changes_since` on PostgreSQL: the snapshot's bounds, the entries and the trim mark
        as one statement, which reads one snapshot (the open read transaction's, else its
        own) without a transaction around it: one round trip where a read transaction of
        its own took four (BEGIN, the entries, the mark, COMMIT)."""
        where, params = horizons.entries_after(seq)
        row = conn.execute(
            f"SELECT {horizons.BOUNDS_COLUMNS}, "
            f"(SELECT array_agg(row_id ORDER BY first) FROM (SELECT row_id, MIN(seq) AS first "
            f"FROM {self.name} WHERE tbl = ? AND {where} GROUP BY row_id) AS entries), "
            "(SELECT value FROM cpersona_meta WHERE key = ?) "
            f"FROM {horizons.SNAPSHOT_FROM}",
            (table, *params, f"{self.name}_trimmed_{table}"),
        ).fetchone()
        assert row is not None  # one row: the FROM is one snapshot
        top = horizons.position_of(int(row[0]), int(row[1]))
        lost = row[3] is not None and _mark(row[3]) > seq
        return Changes([int(r) for r in row[2] or ()], top, lost)

    def trim(self, db: Store, table: str, upto: int, keep: int = 0) -> int:
        """Forget applied entries of `table` (the index file remembers `applied_seq`), and
        remember how far: a file that has applied less can no longer be brought current.
        `keep`: entries left behind `upto` for other hosts' files (SQLite and seq positions;
        a horizon keeps what other hosts need by age, horizons.RETAIN_SECONDS).
        Not a maintenance write on PostgreSQL: the mark only ever rises (GREATEST), so trims
        of several hosts and the writers beside them need no lock but the mark's row."""
        key = f"{self.name}_trimmed_{self._logged(table)}"
        if db.dialect == "sqlite" or horizons.decode(upto) is None:
            upto -= keep
        with db.atomic(exclusive=False) as conn:
            if db.dialect == "sqlite":
                conn.execute(
                    "INSERT INTO cpersona_meta(key, value) VALUES (?, ?) ON CONFLICT(key) "
                    "DO UPDATE SET value = MAX(value, excluded.value)",
                    (key, upto),
                )
                return int(
                    conn.execute(
                        f"DELETE FROM {self.name} WHERE tbl = ? AND seq <= ?", (table, upto)
                    ).rowcount
                )
            # PostgreSQL: what other hosts may still need is kept (horizons.RETAIN_SECONDS);
            # the mark says exactly what went (value is BYTEA there: decimal text).
            sql, params = horizons.trim_statement(self.name, upto)
            deleted = [r[0] for r in conn.execute(sql, (table, *params)).fetchall()]
            mark = horizons.trim_mark(upto, deleted)
            if mark is not None:
                conn.execute(
                    "INSERT INTO cpersona_meta(key, value) VALUES (?, convert_to(?, 'UTF8')) "
                    "ON CONFLICT(key) DO UPDATE SET value = convert_to(GREATEST("
                    "convert_from(cpersona_meta.value, 'UTF8')::bigint, "
                    "convert_from(excluded.value, 'UTF8')::bigint)::text, 'UTF8')",
                    (key, str(mark)),
                )
            return len(deleted)

    def trimmed_upto(self, db: Store, table: str) -> int:
        """The seq up to which `table`'s entries were trimmed (0 = never)."""
        table = self._logged(table)
        row = db.query_one(
            "SELECT value FROM cpersona_meta WHERE key = ?", (f"{self.name}_trimmed_{table}",)
        )
        return _mark(row[0]) if row else 0


def _mark(value: object) -> int:
    """A trim mark as stored: an integer on SQLite, decimal text in BYTEA on PostgreSQL."""
    if isinstance(value, bytes | bytearray | memoryview):
        return int(bytes(value).decode("ascii"))
    return int(str(value)) if not isinstance(value, int) else value
