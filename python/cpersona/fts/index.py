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

import contextlib
import fcntl
import glob
import logging
import os
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from types import ModuleType
from typing import Any

from cpersona.errors import StoreCorrupt
from cpersona.fts import checksums
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
from cpersona.vectors.healing import Healer, orphaned

log = logging.getLogger("cpersona.fts")

#: Applied log entries of a table kept before they are deleted.
TRIM_EVERY = 5000
#: Rebuild (compact) once the file holds this many more records than twice its live rows.
COMPACT_SLACK = 4096
#: Rows per batch of a rebuild (records written and fed to the core together).
BATCH = 8192

Progress = Callable[[int, int], None]


@dataclass(frozen=True, slots=True)
class _Built:
    """A file written by `_build`: its core, header and records' CRC."""

    core: Any
    header: Header
    crc: int


class _Damaged(StoreCorrupt):
    """The file's records are not what their writers wrote (checksum, or they do not parse)."""


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
        #: The CRC of the records the core has read (up to `_loaded_end`; fts/checksums.py).
        self._loaded_crc = 0
        self._healer = Healer(self.path, self._rebuild_online, log)

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

    @property
    def healing(self) -> bool:
        """Whether a damaged file is being rebuilt in the background here; searches use the
        FTS5 statements meanwhile (on PostgreSQL the arm's error path)."""
        return self._healer.running

    def wait_for_healing(self, timeout: float | None = None) -> None:
        self._healer.wait(timeout)

    def current(self, *, heal: bool = True) -> Any:
        """The in-memory index, brought current with SQLite (the Rust core's `FtsIndex`).

        Raises StoreCorrupt while the file is being rebuilt, and when its records turn out
        damaged (then, with `heal`, the rebuild starts in the background): the caller answers
        from the database instead, and does not wait."""
        if self.healing:
            raise StoreCorrupt(f"{self.path.name} is being rebuilt")
        try:
            return self._current()
        except _Damaged as exc:
            if heal:
                self._healer.start(str(exc))
            raise StoreCorrupt(str(exc)) from None

    def _current(self) -> Any:
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
        if self._core is not None and not self.healing:
            # Damage is said once by the healer; searches answer from the database.
            with contextlib.suppress(StoreCorrupt):
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
                crc = checksums.extend(self._loaded_crc, data)
                checksums.write(self.path, new.generation, new.end, crc)
            except OSError:
                self._core = None
                raise
            finally:
                os.close(fd)
            self._loaded_end, self._loaded_crc = new.end, crc
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
        Returns why the file cannot be read ("" = the core is current with the file); raises
        `_Damaged` when its records are not what was written (rebuilt in the background)."""
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
                core, start, crc = self._new_core(), HEADER_LEN, 0
            else:
                core, start, crc = self._core, self._loaded_end, self._loaded_crc
            try:
                while start < header.end:
                    # A record never straddles a read: read the rest at once in big pieces.
                    data = os.pread(fd, header.end - start, start)
                    if not data:
                        return "truncated"
                    crc = checksums.extend(crc, data)
                    core.apply(data)
                    start += len(data)
            except StoreCorrupt as exc:
                self._core = None
                raise _Damaged(str(exc)) from None
            # A record whose text was overwritten in place still parses: the CRC says whether
            # these are the bytes their writers wrote. A core that took others is dropped.
            if (problem := checksums.problem(self.path, header.generation, header.end, crc)) != "":
                self._core = None
                if problem == checksums.DAMAGED:
                    raise _Damaged(problem)
                return problem
            self._core, self._loaded, self._loaded_end = core, ident, header.end
            self._loaded_seq, self._loaded_crc = header.applied_seq, crc
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
        tmp = self.path.with_name(self.path.name + f".tmp{os.getpid()}")
        built = self._build(tmp, progress)
        self._install(tmp, built)
        return built.header.records

    def _build(self, tmp: Path, progress: Progress | None = None) -> _Built:
        """Write every row into `tmp` (and its checksum), as of one snapshot of the table."""
        total = fts_sql.row_count(self.db, self.table)
        core = self._new_core()
        done, crc = 0, 0
        with vector_sql.snapshot(self.db):
            log_seq = fts_sql.max_seq(self.db)
            fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
            complete = False
            try:
                end = HEADER_LEN
                fresh = Header.new(self.table, self.db_uid())
                os.pwrite(fd, fresh.pack(), 0)
                batch: list[bytes] = []
                for row in fts_sql.iter_rows(self.db, self.table):
                    batch.append(put_record(row))
                    done += 1
                    if len(batch) == BATCH:
                        end, crc = self._write_batch(fd, core, batch, end, crc)
                        batch = []
                        if progress is not None:
                            progress(done, total)
                end, crc = self._write_batch(fd, core, batch, end, crc)
                header = replace(
                    fresh, applied_seq=log_seq, dirty=0, end=end, records=done, live=done
                )
                os.pwrite(fd, header.pack(), 0)
                checksums.write(tmp, header.generation, end, crc, fresh=True)
                complete = True
            finally:
                os.close(fd)
                if not complete:  # a full disk mid-write: the temporary must not hold space
                    checksums.remove_with_sum(tmp)
        if progress is not None:
            progress(done, total)
        return _Built(core, header, crc)

    def _install(self, tmp: Path, built: _Built) -> None:
        """Under the exclusive lock: rename a built file and its checksum over the index, and
        make its core this process's (a crash between the renames leaves a checksum of another
        generation: refused, rebuilt)."""
        try:
            os.replace(tmp, self.path)
            os.replace(checksums.sums_path(tmp), checksums.sums_path(self.path))
        except BaseException:
            checksums.remove_with_sum(tmp)
            raise
        st = os.stat(self.path)
        self._core, self._loaded = built.core, (st.st_dev, st.st_ino, built.header.generation)
        self._loaded_end, self._loaded_crc = built.header.end, built.crc
        self._loaded_seq = built.header.applied_seq

    def _rebuild_online(self) -> int:
        """The background rebuild of a damaged file: the rows are written into
        `<file>.heal<pid>` without the lock (this process's searches use FTS5 meanwhile, other
        processes keep their cores); then, under the exclusive lock, the rows logged since
        are appended and the file is renamed in."""
        tmp = self.path.with_name(f"{self.path.name}.heal{os.getpid()}")
        built = self._build(tmp)
        with self._thread_lock, self._flock(exclusive=True):
            seq = built.header.applied_seq
            changes = fts_sql.changes_since(self.db, self.table, seq)
            if self._history_problem(seq) or changes.lost:
                checksums.remove_with_sum(tmp)
                return self._rebuild_locked()
            header, crc = built.header, built.crc
            data = b""
            if changes.row_ids:
                rows = fts_sql.rows_by_id(self.db, self.table, changes.row_ids)
                data = records_for(changes.row_ids, rows)
                built.core.apply(data)
            header = replace(
                header,
                applied_seq=max(seq, changes.max_seq),
                end=header.end + len(data),
                records=header.records + len(changes.row_ids),
                live=int(built.core.live),
            )
            crc = checksums.extend(crc, data)
            fd = os.open(tmp, os.O_RDWR)
            try:
                os.pwrite(fd, data, built.header.end)
                os.pwrite(fd, header.pack(), 0)
            finally:
                os.close(fd)
            checksums.write(tmp, header.generation, header.end, crc, fresh=True)
            self._install(tmp, _Built(built.core, header, crc))
            return header.live

    @staticmethod
    def _write_batch(fd: int, core: Any, batch: list[bytes], end: int, crc: int) -> tuple[int, int]:
        if not batch:
            return end, crc
        data = b"".join(batch)
        os.pwrite(fd, data, end)
        core.apply(data)
        return end + len(data), checksums.extend(crc, data)

    def _remove_stale_temporaries(self) -> None:
        for path in self.path.parent.glob(glob.escape(self.path.name) + ".tmp*"):
            path.unlink(missing_ok=True)
        # A background rebuild writes without the lock: its file is stale once its process
        # is gone.
        for path in self.path.parent.glob(glob.escape(self.path.name) + ".heal*"):
            if orphaned(path.name[len(self.path.name) :]):
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
        h = header
        return FtsStatus(
            self.table,
            str(self.path),
            True,
            True,
            reason,
            h.records,
            h.live,
            h.applied_seq,
            log_seq,
        )

    def verify(self) -> list[str]:
        """Compare every row of the index with SQLite; the differences found (empty = same).

        The index is first brought current; the comparison reads a fresh copy of the file
        (not this process's in-memory core), so it checks what every process would load.
        """
        from cpersona import _backend

        # The index's core is the Rust extension's (there is no other), and so is its fold.
        kernels = _backend.load("rust")
        with contextlib.suppress(StoreCorrupt):  # damaged records: named below
            self.current(heal=False)
        with self._thread_lock, self._flock(exclusive=False):
            header, problem = self._inspect()
            if problem or header is None:
                return [f"{self.table}: full-text index unusable: {problem}"]
            core = self._new_core()
            with open(self.path, "rb") as f:
                f.seek(HEADER_LEN)
                data = f.read(header.end - HEADER_LEN)
            problems: list[str] = []
            crc = checksums.extend(0, data)
            if problem := checksums.problem(self.path, header.generation, header.end, crc):
                problems.append(f"{self.table}: {problem}")
            try:
                core.apply(data)
            except StoreCorrupt as exc:
                return [*problems, f"{self.table}: records do not parse: {exc}"]
            seq = header.applied_seq
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
        self.wait_for_healing(timeout=120.0)
        self._core = None
        if self._tmp is not None:
            self._tmp.cleanup()


def open_fts_indexes(
    db: Database,
    *,
    enabled: bool,
    kernels: ModuleType,
    base: Path | None = None,
    keep_log: int = 0,
) -> dict[str, FtsIndex]:
    """Both tables' full-text indexes, or none: on the numpy kernels (`_backend.load`), with
    FTS disabled, or with `CPERSONA_FTS_INDEX=false`, the FTS arms run the FTS5 statements."""
    core = getattr(kernels, "FtsIndex", None)
    if core is None or not enabled:
        return {}
    return {
        table: FtsIndex(db, table, core, base=base, keep_log=keep_log) for table in fts_sql.TABLES
    }
