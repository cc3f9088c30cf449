"""FtsIndex: one table's full-text index, kept current with SQLite by the server itself.

The same protocol as the vector index (vectors/index.py): triggers log every write that changes
a row's text or scope into `fts_log` in the write's own transaction; before a search, `sync()`
compares the file's `applied_seq` with the log and appends the missing rows as change records
under an exclusive `flock`, marking the file `dirty` while it writes; a file that is missing,
truncated, corrupt, dirty, foreign or from another point of the database's history is rebuilt
from SQLite. Each process holds the index in memory (the Rust core's `FtsIndex`) and reads the
records other processes appended under a shared lock. The file format is docs/fts-index.md.
"""

from __future__ import annotations

import fcntl
import glob
import hashlib
import logging
import os
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from cpersona.errors import StoreCorrupt
from cpersona.fts.format import (
    HEADER_LEN,
    MAGIC,
    OFF_DIRTY,
    TABLE_CODES,
    VERSION,
    Header,
    put_record,
    read_header,
    records_for,
)
from cpersona.storage import Database
from cpersona.storage import fts as fts_sql
from cpersona.storage import vectors as vector_sql
from cpersona.vectors.format import scope_hash

log = logging.getLogger("cpersona.fts")

#: Applied log entries of a table kept before they are deleted.
TRIM_EVERY = 5000
#: Rebuild (compact) once the file holds this many more records than twice its live rows.
COMPACT_SLACK = 4096
#: Rows per batch of a rebuild (records written and fed to the core together).
BATCH = 8192

Progress = Callable[[int, int], None]


@dataclass(frozen=True, slots=True)
class FtsStatus:
    """What `cpersona index status` reports for one table's full-text index."""

    table: str
    path: str
    exists: bool
    usable: bool
    reason: str
    records: int
    live: int
    applied_seq: int
    log_seq: int


class FtsIndex:
    """The full-text index of one table (`memories` or `episodes`) of one database."""

    def __init__(
        self,
        db: Database,
        table: str,
        core: Callable[[], Any],
        base: Path | None = None,
        keep_log: int = 0,
    ) -> None:
        """`base`: the files are `<base>.<table>.fts` (default: next to the SQLite file).
        `keep_log`: applied log entries left untrimmed, for index files on other hosts."""
        if table not in TABLE_CODES:
            raise ValueError(f"no full-text index for table {table!r}")
        self.db = db
        self.table = table
        self._new_core = core
        self._keep_log = keep_log
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        if base is None and db.is_memory:
            self._tmp = tempfile.TemporaryDirectory(prefix="cpersona-fts-")
            base = Path(self._tmp.name) / "memory.db"
        elif base is None:
            base = Path(db.path)
        self.path = Path(f"{base}.{table}.fts")
        self.lock_path = Path(f"{self.path}.lock")
        self._thread_lock = threading.RLock()
        self._db_uid: bytes | None = None
        self._trimmed_upto = 0
        #: The in-memory index, the file it was read from ((dev, ino)) and how far.
        self._core: Any = None
        self._loaded: tuple[int, int, int] | None = None
        self._loaded_end = 0
        self._loaded_seq = -1

    # -- locking -----------------------------------------------------------------------------

    @contextmanager
    def _flock(self, exclusive: bool) -> Iterator[None]:
        fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    def db_uid(self) -> bytes:
        if self._db_uid is None:
            self._db_uid = fts_sql.index_identity(self.db)
        return self._db_uid

    # -- the core a search reads -------------------------------------------------------------

    def current(self) -> Any:
        """The in-memory index, brought current with SQLite (the Rust core's `FtsIndex`)."""
        log_seq = fts_sql.max_seq(self.db)
        with self._thread_lock:
            if self._core is not None and self._loaded_seq == log_seq:
                return self._core
            if self._file_seq() != log_seq:
                with self._flock(exclusive=True):
                    self._sync_locked()
            else:
                with self._flock(exclusive=False):
                    problem = self._catch_up_locked()
                if problem:  # a writer died since the check: repair under the write lock
                    with self._flock(exclusive=True):
                        self._sync_locked()
            return self._core

    def sync(self) -> None:
        """Apply every logged write the file has not seen, and hold the index in memory."""
        self.current()

    def refresh(self) -> None:
        """`sync`, when this process already holds the index (after an own write: a process
        that never searched leaves loading to its first search or the warm-up)."""
        if self._core is not None:
            self.current()

    def _file_seq(self) -> int | None:
        header, problem = self._inspect()
        return None if header is None or problem else header.applied_seq

    def _sync_locked(self) -> None:
        """Under the exclusive lock: repair or extend the file, then catch the core up."""
        header, problem = self._inspect()
        if header is not None and not problem:
            problem = self._history_problem(header.applied_seq)
        if problem:
            log.info("rebuilding %s: %s", self.path.name, problem)
            self._rebuild_locked()
            return
        assert header is not None
        if self._catch_up_locked():
            self._rebuild_locked()
            return
        changes = fts_sql.changes_since(self.db, self.table, header.applied_seq)
        if changes.lost:
            log.info("rebuilding %s: log entries it has not applied were trimmed", self.path.name)
            self._rebuild_locked()
            return
        if changes.row_ids:
            rows = fts_sql.rows_by_id(self.db, self.table, changes.row_ids)
            data = records_for(changes.row_ids, rows)
            # The core takes the records first (its live count goes into the header); if the
            # file cannot take them, the core is dropped and reloaded from the file next time.
            self._core.apply(data)
            live = int(self._core.live)
            records = header.records + len(changes.row_ids)
            if records > 2 * live + COMPACT_SLACK:
                self._rebuild_locked()
                return
            try:
                fd = os.open(self.path, os.O_RDWR)
            except OSError:
                self._core = None
                raise
            try:
                os.pwrite(fd, (1).to_bytes(4, "little"), OFF_DIRTY)
                os.pwrite(fd, data, header.end)
                new = replace(
                    header,
                    applied_seq=changes.max_seq,
                    dirty=0,
                    end=header.end + len(data),
                    records=records,
                    live=live,
                )
                os.pwrite(fd, new.pack(), 0)
            except OSError:
                self._core = None
                raise
            finally:
                os.close(fd)
            self._loaded_end = new.end
        else:
            fd = os.open(self.path, os.O_RDWR)
            try:
                new = replace(header, applied_seq=changes.max_seq, dirty=0)
                os.pwrite(fd, new.pack(), 0)
            finally:
                os.close(fd)
        self._loaded_seq = changes.max_seq
        self._maybe_trim(changes.max_seq)

    def _catch_up_locked(self) -> str:
        """Under either lock: read what the file holds beyond what the core has applied.
        Returns why the file cannot be read ("" = the core is current with the file)."""
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return "missing"
        try:
            st = os.fstat(fd)
            header = read_header(fd)
            problem = self._header_problem(header, st.st_size)
            if problem:
                return problem
            assert header is not None
            ident = (st.st_dev, st.st_ino, header.generation)
            if self._core is None or self._loaded != ident or header.end < self._loaded_end:
                core, start = self._new_core(), HEADER_LEN
            else:
                core, start = self._core, self._loaded_end
            try:
                while start < header.end:
                    # A record never straddles a read: read the rest at once in big pieces.
                    data = os.pread(fd, header.end - start, start)
                    if not data:
                        return "truncated"
                    core.apply(data)
                    start += len(data)
            except StoreCorrupt as exc:
                self._core = None
                return str(exc)
            self._core, self._loaded, self._loaded_end = core, ident, header.end
            self._loaded_seq = header.applied_seq
            return ""
        finally:
            os.close(fd)

    def _maybe_trim(self, applied: int) -> None:
        upto = applied - self._keep_log
        if upto - self._trimmed_upto >= TRIM_EVERY:
            fts_sql.trim_log(self.db, self.table, upto)
            self._trimmed_upto = upto

    # -- checks ------------------------------------------------------------------------------

    def _inspect(self) -> tuple[Header | None, str]:
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return None, "missing"
        except OSError as exc:
            return None, f"unreadable ({exc})"
        try:
            header = read_header(fd)
            return header, self._header_problem(header, os.fstat(fd).st_size)
        finally:
            os.close(fd)

    def _header_problem(self, header: Header | None, size: int) -> str:
        if header is None:
            return f"truncated ({size} bytes, shorter than the header)"
        if header.magic != MAGIC:
            return "not a cpersona full-text index (wrong magic)"
        if header.version != VERSION:
            return f"unsupported version {header.version}"
        if header.dirty:
            return "a writer stopped mid-update"
        if header.end < HEADER_LEN or size < header.end:
            return f"truncated ({size} bytes, records end at {header.end})"
        if header.db_uid != self.db_uid():
            return "it belongs to another database"
        if header.table != TABLE_CODES[self.table]:
            return "it indexes another table"
        return ""

    def _history_problem(self, applied_seq: int) -> str:
        if applied_seq > fts_sql.max_seq(self.db):
            return "it is ahead of this database's log (a database restored from a backup?)"
        if applied_seq < fts_sql.trimmed_upto(self.db, self.table):
            return "log entries it has not applied were trimmed"
        return ""

    # -- rebuild -----------------------------------------------------------------------------

    def rebuild(self, progress: Progress | None = None) -> int:
        """Rewrite the file from SQLite (and reload the core); returns the rows indexed."""
        with self._thread_lock, self._flock(exclusive=True):
            return self._rebuild_locked(progress)

    def _rebuild_locked(self, progress: Progress | None = None) -> int:
        self._remove_stale_temporaries()
        total = fts_sql.row_count(self.db, self.table)
        tmp = self.path.with_name(self.path.name + f".tmp{os.getpid()}")
        core = self._new_core()
        done = 0
        with vector_sql.snapshot(self.db):
            log_seq = fts_sql.max_seq(self.db)
            fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
            replaced = False
            try:
                end = HEADER_LEN
                fresh = Header.new(self.table, self.db_uid())
                os.pwrite(fd, fresh.pack(), 0)
                batch: list[bytes] = []
                for row in fts_sql.iter_rows(self.db, self.table):
                    batch.append(put_record(row))
                    done += 1
                    if len(batch) == BATCH:
                        end = self._write_batch(fd, core, batch, end)
                        batch = []
                        if progress is not None:
                            progress(done, total)
                end = self._write_batch(fd, core, batch, end)
                header = replace(
                    fresh, applied_seq=log_seq, dirty=0, end=end, records=done, live=done
                )
                os.pwrite(fd, header.pack(), 0)
                st = os.fstat(fd)
                os.replace(tmp, self.path)
                replaced = True
            finally:
                os.close(fd)
                if not replaced:  # a full disk mid-write: the temporary must not hold space
                    tmp.unlink(missing_ok=True)
        self._core, self._loaded, self._loaded_end = (
            core,
            (st.st_dev, st.st_ino, fresh.generation),
            end,
        )
        self._loaded_seq = log_seq
        if progress is not None:
            progress(done, total)
        return done

    @staticmethod
    def _write_batch(fd: int, core: Any, batch: list[bytes], end: int) -> int:
        if not batch:
            return end
        data = b"".join(batch)
        os.pwrite(fd, data, end)
        core.apply(data)
        return end + len(data)

    def _remove_stale_temporaries(self) -> None:
        for path in self.path.parent.glob(glob.escape(self.path.name) + ".tmp*"):
            path.unlink(missing_ok=True)

    # -- inspection --------------------------------------------------------------------------

    def status(self) -> FtsStatus:
        log_seq = fts_sql.max_seq(self.db)
        with self._flock(exclusive=False):
            header, problem = self._inspect()
            if header is not None and not problem:
                problem = self._history_problem(header.applied_seq)
        if header is None or problem:
            return FtsStatus(
                self.table, str(self.path), self.path.exists(), False, problem, 0, 0, 0, log_seq
            )
        reason = "current" if header.applied_seq >= log_seq else "behind the log"
        return FtsStatus(
            self.table,
            str(self.path),
            True,
            True,
            reason,
            header.records,
            header.live,
            header.applied_seq,
            log_seq,
        )

    def verify(self) -> list[str]:
        """Compare every row of the index with SQLite; the differences found (empty = same).

        The index is first brought current; the comparison reads a fresh copy of the file
        (not this process's in-memory core), so it checks what every process would load.
        """
        from cpersona._backend import kernels

        self.current()
        with self._thread_lock, self._flock(exclusive=False):
            header, problem = self._inspect()
            if problem or header is None:
                return [f"{self.table}: full-text index unusable: {problem}"]
            core = self._new_core()
            with open(self.path, "rb") as f:
                f.seek(HEADER_LEN)
                core.apply(f.read(header.end - HEADER_LEN))
            seq = header.applied_seq
            problems: list[str] = []
            with vector_sql.snapshot(self.db):
                if fts_sql.max_seq(self.db) != seq:
                    problems.append(f"{self.table}: index applied seq {seq}, the log is further")
                indexed = set(core.ids().tolist())
                for row in fts_sql.iter_rows(self.db, self.table):
                    got = core.row(row.id)
                    if got is None:
                        problems.append(f"{self.table} {row.id}: in SQLite, missing from the index")
                        continue
                    indexed.discard(row.id)
                    want = (
                        scope_hash(row.agent_id),
                        scope_hash(row.project_id),
                        scope_hash(row.channel),
                        0 if row.source_id is None else scope_hash(row.source_id),
                        row.key,
                        row.time,
                        [kernels.fts_fold(c) for c in row.columns],
                    )
                    if tuple(got) != want:
                        problems.append(f"{self.table} {row.id}: differs from SQLite")
            for row_id in sorted(indexed):
                problems.append(f"{self.table} {row_id}: in the index, not in SQLite")
            if header.live != len(core.ids()):
                problems.append(
                    f"{self.table}: header counts {header.live} live rows, the records "
                    f"{len(core.ids())}"
                )
            return problems

    def close(self) -> None:
        self._core = None
        if self._tmp is not None:
            self._tmp.cleanup()


def open_fts_indexes(
    db: Database, *, enabled: bool, base: Path | None = None, keep_log: int = 0
) -> dict[str, FtsIndex]:
    """Both tables' full-text indexes, or none: without the Rust core, with FTS disabled, or
    with `CPERSONA_FTS_INDEX=false`, the FTS arms run the FTS5 statements."""
    from cpersona._backend import kernels

    core = getattr(kernels, "FtsIndex", None)
    if core is None or not enabled:
        return {}
    return {
        table: FtsIndex(db, table, core, base=base, keep_log=keep_log) for table in fts_sql.TABLES
    }


#: On a shared database (PostgreSQL) applied log entries kept beyond the newest this host
#: applied, so that index files on other hosts a little behind can still catch up by replaying
#: rather than rebuild (about 3 MB of log rows).
SHARED_KEEP_LOG = 100_000


def cache_base(cache_dir: str | None, url: str) -> Path:
    """Where this host keeps the full-text index files of the database at `url` (redacted):
    `<CPERSONA_CACHE_DIR or ~/.cache/cpersona>/<hash of url>/index`. The hash covers the whole
    URL (host, port, database, options such as a schema's search_path), so two databases never
    share a file; processes on one host share theirs, each host has its own."""
    if cache_dir:
        root = Path(cache_dir).expanduser()
    else:
        xdg = os.environ.get("XDG_CACHE_HOME", "").strip()
        root = (Path(xdg) if xdg else Path.home() / ".cache") / "cpersona"
    directory = root / hashlib.sha256(url.encode("utf-8")).hexdigest()[:16]
    try:
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        note = directory / "database.txt"
        if not note.exists():  # which database this is, for an operator looking at the cache
            tmp = directory / f"database.txt.tmp{os.getpid()}"
            tmp.write_text(url + "\n", encoding="utf-8")
            os.replace(tmp, note)
    except OSError as exc:
        # Serving goes on: each search then says the index is unusable (search.ranked).
        log.warning("the full-text index directory %s is unusable: %s", directory, exc)
    return directory / "index"
