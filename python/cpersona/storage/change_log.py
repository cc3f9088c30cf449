"""A change log kept by triggers (`vector_log`, `fts_log`): what a derived index file reads to
catch up with the database, and forgets once applied. One implementation for both indexes and
both backends (SQLite, PostgreSQL)."""

from __future__ import annotations

from dataclasses import dataclass

from cpersona.storage.db import Database

LOGS = ("vector_log", "fts_log")


@dataclass(frozen=True, slots=True)
class Changes:
    row_ids: list[int]
    max_seq: int
    #: Entries after the caller's seq were trimmed (by another host's process, which applied
    #: them to its own index file): the caller's index cannot be brought current by replaying
    #: and must be rebuilt.
    lost: bool = False


def _as_int(value: object) -> int:
    # A trim mark is an INTEGER on SQLite and ASCII digits in PostgreSQL's bytea column.
    if isinstance(value, int):
        return value
    return int(bytes(value))  # type: ignore[call-overload]


@dataclass(frozen=True, slots=True)
class ChangeLog:
    """One log table; `table` arguments are checked by the caller (memories or episodes)."""

    name: str

    def __post_init__(self) -> None:
        if self.name not in LOGS:
            raise ValueError(f"no change log {self.name!r}")

    def _high_water(self, db: Database) -> str:
        if db.dialect == "postgresql":
            # The largest COMMITTED seq, not the sequence's last_value: nextval() is not
            # transactional, so the sequence runs ahead of a writer that has not committed,
            # and a reader taking it as the mark would skip that writer's entries for good.
            # Writers hold one global advisory lock (PgDatabase.atomic), so entries commit in
            # seq order and every seq up to the largest visible one is visible. `trim` keeps
            # the newest entry, so trimming never lowers this mark either.
            return f"SELECT COALESCE(MAX(seq), 0) FROM {self.name}"
        # sqlite_sequence keeps the largest seq ever handed out (in the writer's transaction),
        # so trimming the log never lowers it, and an index file that has applied more than
        # this comes from another point of the database's history (a restored backup).
        return f"SELECT COALESCE((SELECT seq FROM sqlite_sequence WHERE name = '{self.name}'), 0)"

    def max_seq(self, db: Database) -> int:
        """The largest seq ever written (trimmed entries included)."""
        row = db.query_one(self._high_water(db))
        return int(row[0]) if row else 0

    def changes_since(self, db: Database, table: str, seq: int) -> Changes:
        """Distinct row ids of `table` logged after `seq`, oldest change first, and the max."""
        conn = db.reader()
        # One snapshot for the statements (PostgreSQL: the reader's BEGIN is REPEATABLE READ),
        # so no change slips between them (the caller's, when this thread's reader is already
        # inside a read transaction: BEGIN would fail). The trim mark read in it says whether
        # entries after `seq` were deleted (by another host's process) before the snapshot.
        own = not conn.in_transaction
        if own:
            conn.execute("BEGIN")
        try:
            top = conn.execute(self._high_water(db)).fetchone()[0]
            rows = conn.execute(
                f"SELECT row_id, MIN(seq) AS first FROM {self.name} WHERE tbl = ? AND seq > ? "
                "AND seq <= ? GROUP BY row_id ORDER BY first",
                (table, seq, top),
            ).fetchall()
            mark = conn.execute(
                "SELECT value FROM cpersona_meta WHERE key = ?", (self._mark_key(table),)
            ).fetchone()
        finally:
            if own:
                conn.execute("COMMIT")
        lost = mark is not None and _as_int(mark[0]) > seq
        return Changes([int(r[0]) for r in rows], int(top), lost)

    def _mark_key(self, table: str) -> str:
        return f"{self.name}_trimmed_{table}"

    def trim(self, db: Database, table: str, upto: int) -> int:
        """Forget applied entries of `table` (the index file remembers `applied_seq`), and
        remember how far: a file that has applied less can no longer be brought current."""
        key = self._mark_key(table)
        with db.atomic() as conn:
            if db.dialect == "postgresql":
                # Writers are serialised (one advisory lock), so read-then-write is safe. The
                # log's newest entry stays: it is the high-water mark (`_high_water`).
                row = conn.execute("SELECT value FROM cpersona_meta WHERE key = ?", (key,))
                old = row.fetchone()
                mark = max(upto, _as_int(old[0]) if old else 0)
                conn.execute(
                    "INSERT INTO cpersona_meta(key, value) VALUES (?, ?) ON CONFLICT(key) "
                    "DO UPDATE SET value = excluded.value",
                    (key, str(mark).encode("ascii")),
                )
                return conn.execute(
                    f"DELETE FROM {self.name} WHERE tbl = ? AND seq <= ? "
                    f"AND seq < (SELECT MAX(seq) FROM {self.name})",
                    (table, upto),
                ).rowcount
            conn.execute(
                "INSERT INTO cpersona_meta(key, value) VALUES (?, ?) ON CONFLICT(key) "
                "DO UPDATE SET value = MAX(value, excluded.value)",
                (key, upto),
            )
            return conn.execute(
                f"DELETE FROM {self.name} WHERE tbl = ? AND seq <= ?", (table, upto)
            ).rowcount

    def trimmed_upto(self, db: Database, table: str) -> int:
        """The seq up to which `table`'s entries were trimmed (0 = never)."""
        key = self._mark_key(table)
        row = db.query_one("SELECT value FROM cpersona_meta WHERE key = ?", (key,))
        return _as_int(row[0]) if row else 0
