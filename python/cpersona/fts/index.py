"""FtsIndex: one table's full-text index, kept current with SQLite by the server itself.

The same protocol as the vector index (vectors/index.py): triggers log every write that changes
a row's text or scope into `fts_log` in the write's own transaction; before a search, `sync()`
compares the file's `applied_seq` with the log and appends the missing rows as change records
under an exclusive `flock`, marking the file `dirty` while it writes; a file that is missing,
truncated, corrupt, dirty, foreign or from another point of the database's history is rebuilt
from SQLite: inside the call for a small table, else in the background (vectors/healing.py's
`Healer`, shared with the vector index) while searches run the FTS5 statements; on PostgreSQL,
which has no FTS5 to answer with the same rows, inside the call. Each process holds the index
in memory (the Rust core's `FtsIndex`) and reads the records other processes appended under a
shared lock. The file format is docs/fts-index.md; the rebuilds are in fts/rebuild.py.
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

from cpersona.errors import AheadOfSnapshot, StoreCorrupt
from cpersona.fts import checksums, rebuild, segment
from cpersona.fts.format import (
    HEADER_LEN,
    MAGIC,
    OFF_DIRTY,
    TABLE_CODES,
    VERSION,
    Header,
    read_header,
    records_for,
)
from cpersona.fts.rebuild import Built
from cpersona.storage import Store
from cpersona.storage import embeddings as vector_sql
from cpersona.storage import fulltext as fts_sql
from cpersona.vectors import healing
from cpersona.vectors.format import scope_hash
from cpersona.vectors.healing import Healer, RebuildProgress, orphaned
from cpersona.yielding import CallActivity

log = logging.getLogger("cpersona.fts")

#: Applied log entries of a table kept before they are deleted.
TRIM_EVERY = 5000
#: Rebuild (compact) once the file holds this many more records than twice its live rows.
COMPACT_SLACK = 4096

Progress = Callable[[int, int], None]


class _Damaged(StoreCorrupt):
    """The file's records are not what their writers wrote (checksum, or they do not parse)."""


class _Deferred(StoreCorrupt):
    """The file is rebuilt in the background: the caller answers from the database."""


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
    #: The background rebuild running on this host, if any.
    rebuild: RebuildProgress | None = None


class FtsIndex:
    """The full-text index of one table (`memories` or `episodes`) of one database."""

    def __init__(
        self,
        db: Store,
        table: str,
        core: Callable[[], Any],
        base: Path | None = None,
        keep_log: int = 0,
        *,
        background: bool = True,
        activity: CallActivity | None = None,
    ) -> None:
        """`base`: the files are `<base>.<table>.fts` (default: next to the SQLite file).
        `keep_log`: applied log entries left untrimmed, for index files on other hosts.
        `background`: whether a large rebuild runs in the background (the database has FTS5
        to answer meanwhile); `activity`: the calls that rebuild gives way to."""
        if table not in TABLE_CODES:
            raise ValueError(f"no full-text index for table {table!r}")
        self.db = db
        self.table = table
        self._new_core = core
        self._keep_log = keep_log
        self._background = background
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
        self._healer = Healer(
            self.path,
            lambda step: rebuild.rebuild_online(self, step),
            log,
            needed=self._rebuild_reason,
            activity=activity,
        )

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
        """Whether the file is being rebuilt in the background here (or waits for another
        process's rebuild); searches use the FTS5 statements meanwhile (on PostgreSQL, where
        only damage is rebuilt so, the arm's error path)."""
        return self._healer.running

    def wait_for_healing(self, timeout: float | None = None) -> None:
        self._healer.wait(timeout)

    def current(self, *, heal: bool = True) -> Any:
        """The in-memory index, brought current with SQLite (the Rust core's `FtsIndex`).

        Raises StoreCorrupt while the file is being rebuilt, and when its records turn out
        damaged (then, with `heal`, the rebuild starts in the background): the caller answers
        from the database instead, and does not wait. None inside a read snapshot that the
        file has moved past while this process holds no core as new (the caller answers from
        the database as well)."""
        if self.healing:
            raise StoreCorrupt(f"{self.path.name} is being rebuilt")
        try:
            return self._current()
        except AheadOfSnapshot:
            return None
        except _Deferred as exc:
            raise StoreCorrupt(str(exc)) from None
        except _Damaged as exc:
            if heal:
                self._healer.start(str(exc))
            raise StoreCorrupt(str(exc)) from None

    def _current(self) -> Any:
        log_seq = fts_sql.max_seq(self.db)
        with self._thread_lock:
            if self._core is not None and self._loaded_seq == log_seq:
                return self._core
            if self.db.in_snapshot() and (self._loaded_seq or 0) > log_seq:
                # This process's core moved past the caller's read snapshot (a write of
                # another thread was applied meanwhile): the caller hydrates its hits from the
                # snapshot, which drops rows written since. Rebuilding would be wrong: it is
                # ahead of the snapshot, not of the log.
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

    def sync(self) -> bool:
        """Apply every logged write the file has not seen, and hold the index in memory;
        False while the file is rebuilt in the background (searches use FTS5 meanwhile)."""
        try:
            self.current()
        except StoreCorrupt:
            if self.healing:
                return False
            raise
        return True

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
            self._rebuild_or_defer(problem)
            return
        assert header is not None
        if problem := self._catch_up_locked():
            self._rebuild_or_defer(problem)
            return
        changes = fts_sql.changes_since(self.db, self.table, header.applied_seq)
        if changes.lost:
            self._rebuild_or_defer("log entries it has not applied were trimmed")
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
                self._core = None  # it took records the file has not: read again after
                self._rebuild_or_defer("more than half its records are superseded")
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

    def _rebuild_or_defer(self, reason: str) -> None:
        """Under the exclusive lock: rebuild now a small table, or any table where the database
        has no FTS5 to answer meanwhile (PostgreSQL); else start the background rebuild and
        raise `_Deferred` (the caller runs the FTS5 statement, and never waits for it)."""
        total = fts_sql.row_count(self.db, self.table)
        if not self._background or total <= healing.INLINE_ROWS:
            log.info("rebuilding %s: %s", self.path.name, reason)
            self._rebuild_locked()
            return
        self._healer.start(reason, damaged=False)
        raise _Deferred(f"{self.path.name} is rebuilt in the background ({reason})")

    def _rebuild_reason(self) -> str:
        """Why the file needs a rebuild ("" = it is sound): asked by a background rebuild
        that waited for another process's."""
        with self._flock(exclusive=False):
            header, problem = self._inspect()
            if header is not None and not problem:
                problem = self._history_problem(header.applied_seq)
            return problem

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
                core, start, crc = self._open_core(header)
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
            core = self._open_core(header, core, crc)[0]  # a new segment if the delta grew
            self._core, self._loaded, self._loaded_end = core, ident, header.end
            self._loaded_seq, self._loaded_crc = header.applied_seq, crc
            return ""
        finally:
            os.close(fd)

    def _open_core(self, header: Header, core: Any = None, crc: int = 0) -> tuple[Any, int, int]:
        """Under either lock (fts/segment.py). Without `core`: a new core, mapped from the
        file's segment when it has one, and where its records start for it, and their CRC.
        With `core` (current with the file, whose records have the CRC `crc`): it, or one
        mapped from a new segment of it when it holds too many rows in the heap."""
        code = TABLE_CODES[self.table]
        if core is not None:
            new = segment.compact(
                core, self._new_core, self.path, code, header.generation, header.end, crc
            )
            return new, header.end, crc
        opened = segment.open_mapped(self._new_core, self.path, code, header.generation, header.end)
        return opened if opened is not None else (self._new_core(), HEADER_LEN, 0)

    def _maybe_trim(self, applied: int) -> None:
        upto = applied - self._keep_log
        # Not from inside a read snapshot (a write: see VectorIndex._maybe_trim).
        if upto - self._trimmed_upto >= TRIM_EVERY and not self.db.in_snapshot():
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
            if self.db.in_snapshot():  # synced meanwhile by another thread or process
                raise AheadOfSnapshot(f"{self.path.name} applied {applied_seq}")
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
        built = rebuild.build(self, tmp, progress)
        self._install(tmp, built)
        return built.header.records

    def _install(self, tmp: Path, built: Built) -> None:
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
        rebuild = healing.progress_of(self.path)
        log_seq = fts_sql.max_seq(self.db)
        with self._flock(exclusive=False):
            header, problem = self._inspect()
            if header is not None and not problem:
                problem = self._history_problem(header.applied_seq)
        if header is None or problem:
            return FtsStatus(
                self.table,
                str(self.path),
                self.path.exists(),
                False,
                problem,
                0,
                0,
                0,
                log_seq,
                rebuild,
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
            rebuild,
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
        if self.healing:  # a rebuild it needed (or one running): compare what it installs
            self.wait_for_healing()
            with contextlib.suppress(StoreCorrupt):
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
        self._healer.stop(timeout=120.0)
        self._core = None
        if self._tmp is not None:
            self._tmp.cleanup()


def open_fts_indexes(
    db: Store,
    *,
    enabled: bool,
    kernels: ModuleType,
    base: Path | None = None,
    keep_log: int = 0,
    background: bool = True,
    activity: CallActivity | None = None,
) -> dict[str, FtsIndex]:
    """Both tables' full-text indexes, or none: on the numpy kernels (`_backend.load`), with
    FTS disabled, or with `CPERSONA_FTS_INDEX=false`, the FTS arms run the FTS5 statements.
    `background`, `activity`: as `FtsIndex` takes them."""
    core = getattr(kernels, "FtsIndex", None)
    if core is None or not enabled:
        return {}
    return {
        table: FtsIndex(
            db, table, core, base=base, keep_log=keep_log, background=background, activity=activity
        )
        for table in fts_sql.TABLES
    }
