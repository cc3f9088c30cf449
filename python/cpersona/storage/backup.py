"""Whole-database copies through SQLite's online backup API (`cpersona backup` / `restore`).

Never a file copy: a live database in WAL mode is the main file *and* its `-wal`, and a copy
of the main file alone misses every commit not yet checkpointed. The backup API reads pages
through SQLite. `copy_out` holds one read transaction on the source for the whole copy, so the
bundle is the database as of one instant even while other processes write (WAL readers never
block writers, and the copy is not restarted by their commits: every step reads the same
snapshot). `copy_in` writes pages into the target through SQLite under its write lock, so a
server that has the target open sees the restored content at its next read instead of a file
swapped under it.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path

from cpersona.storage.counts import DATA_TABLES
from cpersona.storage.db import BUSY_TIMEOUT_MS, quote_identifier
from cpersona.storage.error_kinds import CorruptError, translating

#: Pages per backup step: progress is reported after each (4 MiB at the default page size).
STEP_PAGES = 1024

#: Called after each step with (pages copied, pages in all).
Progress = Callable[[int, int], None]


@contextlib.contextmanager
def _connect(path: str | Path, *, read_only: bool = False) -> Iterator[sqlite3.Connection]:
    if read_only:
        conn = sqlite3.connect(f"{Path(path).resolve().as_uri()}?mode=ro", uri=True)
    else:
        conn = sqlite3.connect(path)
    conn.isolation_level = None
    try:
        conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        yield conn
    finally:
        conn.close()


def _step_reporter(progress: Progress | None) -> Callable[[int, int, int], None] | None:
    if progress is None:
        return None
    return lambda status, remaining, total: progress(total - remaining, total)


@translating
def copy_out(
    source: str, dest: Path, *, progress: Progress | None = None, step_pages: int = STEP_PAGES
) -> None:
    """Write the committed state of `source` as of this call to `dest` (a new file).

    `dest` is a self-contained rollback-journal file (no `-wal` beside it), checked with
    `PRAGMA quick_check` before this returns.

    Raises:
        StorageError: the source cannot be read, or the copy is damaged (CorruptError).
    """
    # A read-write connection, though it only reads: a read-only one cannot open a WAL
    # database whose `-shm` no running server has created.
    with _connect(source) as src, _connect(dest) as dst:
        # The read transaction, begun and pinned by a first read, is the snapshot: every step
        # below reads it, whatever other connections commit meanwhile.
        src.execute("BEGIN")
        src.execute("SELECT COUNT(*) FROM sqlite_schema").fetchone()
        try:
            src.backup(dst, pages=step_pages, progress=_step_reporter(progress))
        finally:
            src.execute("COMMIT")
        dst.execute("PRAGMA journal_mode=DELETE")
        problem = _quick_check(dst)
        if problem:
            raise CorruptError(f"the copy failed its check: {problem}")


@translating
def copy_in(
    bundle_db: Path, target: str, *, progress: Progress | None = None, step_pages: int = STEP_PAGES
) -> None:
    """Replace the content of `target` (created if missing) with that of `bundle_db`.

    Raises:
        StorageError: either file cannot be used (a target with another page size in WAL
            mode, a target locked past the busy timeout), or the result fails its check.
    """
    with _connect(bundle_db, read_only=True) as src, _connect(target) as dst:
        src.backup(dst, pages=step_pages, progress=_step_reporter(progress))
        problem = _quick_check(dst)
        if problem:
            raise CorruptError(f"the restored database failed its check: {problem}")


@translating
def data_rows(path: str) -> int:
    """Rows in the data tables of the database at `path` (a missing table counts 0).

    Raises:
        StorageError: the file is not an SQLite database (CorruptError).
    """
    with _connect(path) as conn:
        present = {
            str(r[0]) for r in conn.execute("SELECT name FROM sqlite_schema WHERE type = 'table'")
        }
        total = 0
        for table in DATA_TABLES:
            if table in present:
                sql = f"SELECT COUNT(*) FROM {quote_identifier(table)}"
                total += int(conn.execute(sql).fetchone()[0])
        return total


def _quick_check(conn: sqlite3.Connection) -> str:
    rows = [str(r[0]) for r in conn.execute("PRAGMA quick_check").fetchall()]
    return "" if rows == ["ok"] else "; ".join(rows[:5])
