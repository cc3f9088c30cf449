"""A change log kept by triggers (`vector_log`, `fts_log`): what a derived index file reads to
catch up with SQLite, and forgets once applied. One implementation for both indexes."""

from __future__ import annotations

from dataclasses import dataclass

from cpersona.storage.interface import Store

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

    def _high_water_of(self, db: Store) -> str:
        if db.dialect == "sqlite":
            return self._high_water
        # PostgreSQL: every writer holds the global write lock until it commits, so seqs
        # become visible in seq order and the largest visible one is a safe mark; trimmed
        # entries are remembered by their marks in cpersona_meta (stored as decimal text).
        return (
            f"SELECT GREATEST(COALESCE((SELECT MAX(seq) FROM {self.name}), 0), COALESCE(("
            "SELECT MAX(convert_from(value, 'UTF8')::bigint) FROM cpersona_meta "
            f"WHERE key LIKE '{self.name}_trimmed_%'), 0))"
        )

    def _logged(self, table: str) -> str:
        if table not in TABLES:
            raise ValueError(f"no {self.index} index for table {table!r}")
        return table

    def max_seq(self, db: Store) -> int:
        """The largest seq ever written (trimmed entries included)."""
        row = db.query_one(self._high_water_of(db))
        return int(row[0]) if row else 0

    def changes_since(self, db: Store, table: str, seq: int) -> Changes:
        """Distinct row ids of `table` logged after `seq`, oldest change first, and the max."""
        table = self._logged(table)
        conn = db.reader()
        # One snapshot for both statements, so no change slips between them (the caller's,
        # when this thread's reader is already inside a read transaction: BEGIN would fail).
        own = not conn.in_transaction
        if own:
            conn.execute("BEGIN")
        try:
            top = conn.execute(self._high_water_of(db)).fetchone()[0]
            rows = conn.execute(
                f"SELECT row_id, MIN(seq) AS first FROM {self.name} WHERE tbl = ? AND seq > ? "
                "AND seq <= ? GROUP BY row_id ORDER BY first",
                (table, seq, top),
            ).fetchall()
            # Read in the same snapshot: were entries this read needed deleted before it?
            mark = conn.execute(
                "SELECT value FROM cpersona_meta WHERE key = ?", (f"{self.name}_trimmed_{table}",)
            ).fetchone()
        finally:
            if own:
                conn.execute("COMMIT")
        lost = mark is not None and int(mark[0]) > seq
        return Changes([int(r[0]) for r in rows], int(top), lost)

    def trim(self, db: Store, table: str, upto: int) -> int:
        """Forget applied entries of `table` (the index file remembers `applied_seq`), and
        remember how far: a file that has applied less can no longer be brought current."""
        key = f"{self.name}_trimmed_{self._logged(table)}"
        with db.atomic() as conn:
            if db.dialect == "sqlite":
                conn.execute(
                    "INSERT INTO cpersona_meta(key, value) VALUES (?, ?) ON CONFLICT(key) "
                    "DO UPDATE SET value = MAX(value, excluded.value)",
                    (key, upto),
                )
            else:  # value is BYTEA there: the mark as decimal text, compared as a number
                conn.execute(
                    "INSERT INTO cpersona_meta(key, value) VALUES (?, convert_to(?, 'UTF8')) "
                    "ON CONFLICT(key) DO UPDATE SET value = convert_to(GREATEST("
                    "convert_from(cpersona_meta.value, 'UTF8')::bigint, "
                    "convert_from(excluded.value, 'UTF8')::bigint)::text, 'UTF8')",
                    (key, str(int(upto))),
                )
            return conn.execute(
                f"DELETE FROM {self.name} WHERE tbl = ? AND seq <= ?", (table, upto)
            ).rowcount

    def trimmed_upto(self, db: Store, table: str) -> int:
        """The seq up to which `table`'s entries were trimmed (0 = never)."""
        table = self._logged(table)
        row = db.query_one(
            "SELECT value FROM cpersona_meta WHERE key = ?", (f"{self.name}_trimmed_{table}",)
        )
        return int(row[0]) if row else 0
