"""DerivedIndex: one table's index file derived from the database and kept current from its
change log, whatever the file's format (docs/architecture.md, "Derived indexes").

The database is the truth. Triggers log every write that can change what the file holds
(`vector_log`, `fts_log`: storage/change_log.py) in the write's own transaction. Before a read
the index compares the file's `applied_seq` with the log and applies what is missing under an
exclusive `flock` on `<file>.lock`, the file marked `dirty` while it mutates; readers hold the
shared lock. A file that is missing, garbled, dirty (a writer died), foreign (another
database's `db_uid`) or from another point of the database's history (`_history_problem`) is
rebuilt from the database: inside the call for a small table, else in the background
(healing.py's `Healer` runs `_rebuild_online`) while the caller answers from the database. A
rebuild writes a private file and renames it (and its `.sum` sidecar) in. So any number of
processes on one host see one current file, and a crash at any point is repaired on the next
read.

Both rebuilds are written once, here, as templates the plug-ins fill in: the one under the lock
(`rebuild`) builds and installs; the online one (`_rebuild_online`) builds without the lock,
then under it catches the built file up with the log and installs it. What differs between the
kinds is the plug-in's: the header (`_parse`, `_fields`), how the logged changes are applied
(`_open_for_update`, `_apply`), how a file is built from scratch and caught up (`_build`,
`_built_seq`, `_catch_up`, `_installed`), and how the kernel reads it (the plug-in's own
methods). After a write of its own a process calls `after_write`, whatever the kind.

Positions (`applied_seq`, the log's `max_seq`) are the change log's opaque integers: they are
compared here (`_history_problem`, `_ahead_of_snapshot`, `sync`, `_maybe_trim`,
`_status_parts`, `lag`) and nowhere else.
"""

from __future__ import annotations

import glob
import logging
import os
import tempfile
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Generic, Protocol, TypeVar

from cpersona.derived import healing
from cpersona.derived.healing import RebuildProgress
from cpersona.derived.locks import file_lock, unobstructed
from cpersona.derived.placement import index_base
from cpersona.errors import AheadOfSnapshot
from cpersona.storage import Store
from cpersona.storage.change_log import Changes
from cpersona.storage.embeddings import index_identity
from cpersona.yielding import CallActivity

H = TypeVar("H")  # the plug-in's header
U = TypeVar("U")  # what the plug-in applies changes through (a writer, a header)
B = TypeVar("B")  # what the plug-in's build hands its catch-up and its install

Progress = Callable[[int, int], None]


class LogSource(Protocol):
    """The SQL behind one index kind (storage/embeddings.py, storage/fulltext.py): its change
    log, read through the module so that what a test replaces there is what the index calls."""

    def max_seq(self, db: Store) -> int: ...
    def changes_since(self, db: Store, table: str, seq: int) -> Changes: ...
    def trim_log(self, db: Store, table: str, upto: int, keep: int = 0) -> int: ...
    def trimmed_upto(self, db: Store, table: str) -> int: ...


@dataclass(frozen=True, slots=True)
class Fields:
    """The header fields every derived file has, whatever its layout."""

    dirty: bool
    db_uid: bytes
    table: int
    applied_seq: int


class DerivedIndex(Generic[H, U, B]):
    """The log-following file of one table; a plug-in subclass gives the format."""

    #: The kind, as errors name it ("vector", "full-text").
    kind: ClassVar[str]
    #: The file's name after `<base>.<table>`.
    suffix: ClassVar[str]
    #: The tables indexed, and the code the header records for each.
    table_codes: ClassVar[Mapping[str, int]]
    #: The change log the file follows (its identity is bound to it on PostgreSQL).
    log_name: ClassVar[str]
    #: The private directory of an in-memory database's file.
    temp_prefix: ClassVar[str]

    def __init__(
        self,
        db: Store,
        table: str,
        source: LogSource,
        base: Path | None,
        logger: logging.Logger,
        *,
        keep_log: int = 0,
        background: bool = True,
        activity: CallActivity | None = None,
    ) -> None:
        """`base`: the files are `<base>.<table><suffix>` (default: beside the database file,
        or in this host's cache directory where `db.capabilities.derived_files` says so).
        `keep_log`: applied log entries left untrimmed, for index files on other hosts.
        `background`: whether a large rebuild runs in the background (the database answers
        meanwhile); `activity`: the calls that rebuild gives way to (yielding.py)."""
        if table not in self.table_codes:
            raise ValueError(f"no {self.kind} index for table {table!r}")
        self.db = db
        self.table = table
        self.source = source
        self._log = logger
        self._keep_log = keep_log
        self._background = background
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        if base is None and db.is_memory:
            # An in-memory database keeps its index in a private temporary directory.
            self._tmp = tempfile.TemporaryDirectory(prefix=self.temp_prefix)
            base = Path(self._tmp.name) / "memory.db"
        elif base is None:
            base = index_base(db)
        self.path = Path(f"{base}.{table}{self.suffix}")
        self.lock_path = Path(f"{self.path}.lock")
        # Reentrant: a plug-in's read may repair under the same thread's lock.
        self._thread_lock = threading.RLock()
        self._db_uid: bytes | None = None
        self._trimmed_upto = 0
        #: The background rebuild of a file found damaged, missing or stale (healing.py).
        self._healer = healing.Healer(
            self.path,
            self._rebuild_online,
            logger,
            needed=self._rebuild_reason,
            activity=activity,
        )

    # -- the plug-in's part ------------------------------------------------------------------

    def _parse(self, fd: int, size: int) -> tuple[H | None, str]:
        """The header of the open file and what its format checks find wrong ("" = none)."""
        raise NotImplementedError

    def _fields(self, header: H) -> Fields:
        raise NotImplementedError

    def _file_problem(self, header: H) -> str:
        """A check beyond the header's (the vector file's sidecar): "" = none."""
        return ""

    def _open_for_update(self) -> tuple[U | None, int, str]:
        """Under the exclusive lock: what the changes are applied through, the applied_seq
        they follow, or why the file must be rebuilt instead."""
        raise NotImplementedError

    def _close_update(self, handle: U) -> None:
        """Release what `_open_for_update` opened."""

    def _apply(self, handle: U, changes: Changes) -> str:
        """Apply `changes` and record `changes.max_seq` as applied; or say why the file must be
        rebuilt instead ("" = applied)."""
        raise NotImplementedError

    def _more_rows_than(self, limit: int) -> bool:
        """Whether the table holds more than `limit` rows the file indexes."""
        raise NotImplementedError

    def _build(self, tmp: Path, progress: Progress | None, *, online: bool) -> B:
        """Write the whole file (and its sidecar) into `tmp`, from the database, as of a log
        position (`_built_seq`); `progress(done, total)` now and then. `online`: written
        without the lock for a background rebuild (its steps are `healing.STEP_ROWS` rows;
        it may raise `RebuildStopped` from `progress`)."""
        raise NotImplementedError

    def _built_seq(self, built: B) -> int:
        """The log position the built file has applied."""
        raise NotImplementedError

    def _catch_up(self, tmp: Path, built: B, changes: Changes) -> B | None:
        """Under the exclusive lock: apply `changes` (logged since `_built_seq(built)`) to the
        built file at `tmp`; what it is then, or None when the table must be rebuilt under the
        lock instead (a compaction, a first row of another width)."""
        raise NotImplementedError

    def _built_rows(self, built: B) -> int:
        raise NotImplementedError

    def _installed(self, built: B) -> None:
        """The built file is the index now (a plug-in drops or takes its in-memory state)."""

    def _stale_extra(self) -> list[Path]:
        """Temporaries besides `.tmp*` and `.heal*` that a dead writer may leave."""
        return []

    def _deferring(self) -> None:
        """A background rebuild starts: drop what would keep the old file's mapping alive."""

    def _release(self) -> None:
        """The index closes."""

    @property
    def trim_every(self) -> int:
        """Applied log entries of a table kept before they are deleted."""
        raise NotImplementedError

    # -- locks and identity ------------------------------------------------------------------

    def _flock(self, exclusive: bool) -> AbstractContextManager[None]:
        return file_lock(self.lock_path, exclusive)

    def db_uid(self) -> bytes:
        """The identity a file of this database records (a file from another is foreign)."""
        if self._db_uid is None:
            self._db_uid = index_identity(self.db, self.log_name)
        return self._db_uid

    @staticmethod
    def _sidecar(path: Path) -> Path:
        return Path(f"{path}.sum")

    # -- checks ------------------------------------------------------------------------------

    def _inspect(self) -> tuple[H | None, str]:
        """The file's header and why the file cannot be trusted ("" = it can), read with plain
        file reads, so that a short, oversized or garbled file is reported instead of failing
        to map."""
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return None, "missing"
        except OSError as exc:
            return None, f"unreadable ({exc})"
        try:
            header, problem = self._parse(fd, os.fstat(fd).st_size)
        except IsADirectoryError:
            return None, "a directory stands where the file belongs"
        except OSError as exc:
            return None, f"unreadable ({exc})"
        finally:
            os.close(fd)
        return header, self._judged(header, problem)

    def _judged(self, header: H | None, problem: str) -> str:
        """`problem` (the format's), else what the header's identity says."""
        if header is None or problem:
            return problem
        f = self._fields(header)
        if f.dirty:
            return "a writer stopped mid-update"
        if f.db_uid != self.db_uid():
            return "it belongs to another database"
        if f.table != self.table_codes[self.table]:
            return "it indexes another table"
        return self._file_problem(header)

    def _history_problem(self, applied_seq: int) -> str:
        """Whether this database's log can bring a file that has applied `applied_seq` current.

        Under either lock, a trusted file has applied at most the log's high-water mark and at
        least what was trimmed (a trim follows an apply), so neither test can fire on a file
        this database's own syncs wrote."""
        if applied_seq > self.source.max_seq(self.db):
            if self.db.in_snapshot():  # synced meanwhile by another thread or process
                raise AheadOfSnapshot(f"{self.path.name} applied {applied_seq}")
            return "it is ahead of this database's log (a database restored from a backup?)"
        if applied_seq < self.source.trimmed_upto(self.db, self.table):
            return "log entries it has not applied were trimmed"
        return ""

    def _ahead_of_snapshot(self, applied: int | None, log_seq: int) -> bool:
        """Whether, inside a read snapshot, what has applied `applied` is ahead of the
        snapshot's log `log_seq` (of the caller, not of history)."""
        return applied is not None and applied > log_seq and self.db.in_snapshot()

    def _refuse_ahead(self, applied: int | None, log_seq: int) -> None:
        """AheadOfSnapshot for a file ahead of the caller's snapshot (the caller reads the
        database)."""
        if self._ahead_of_snapshot(applied, log_seq):
            raise AheadOfSnapshot(f"{self.path.name} applied {applied}, the snapshot {log_seq}")

    def _trusted(self) -> tuple[H | None, str]:
        """Under either lock: the header, and why the file cannot be used ("" = it can)."""
        header, problem = self._inspect()
        if header is not None and not problem:
            problem = self._history_problem(self._fields(header).applied_seq)
        return header, problem

    def _applied_seq_unlocked(self) -> int | None:
        """The file's applied_seq read without the lock (a hint: sync re-checks under lock)."""
        header, problem = self._inspect()
        return None if header is None or problem else self._fields(header).applied_seq

    @contextmanager
    def reading_as_is(self) -> Iterator[int | None]:
        """The file as it is, without following the log, under the shared lock while the caller
        reads it: yields the position it has applied, None when it cannot be read as it is (the
        caller follows the log as usual). For a read made while the caller's snapshot is still
        being opened (vectors/search.py): its answer counts only if `current_at` the position."""
        if self._healer.running:
            yield None
            return
        with self._flock(exclusive=False):
            header, problem = self._inspect()
            yield None if header is None or problem else self._fields(header).applied_seq

    def current_at(self, applied: int) -> bool:
        """Whether a file that has applied `applied` holds exactly the caller's snapshot: the
        test `sync` makes before it reads a file without applying anything (there with the
        high-water mark it goes on to use, so it reads it once)."""
        return applied == self.source.max_seq(self.db)

    def _rebuild_reason(self) -> str:
        """Why the file needs a rebuild ("" = it is sound): asked by a background rebuild
        that waited for another process's."""
        with self._flock(exclusive=False):
            return self._trusted()[1]

    # -- following the log -------------------------------------------------------------------

    def sync(self) -> bool:
        """Apply every logged write the file has not seen; rebuild a file that cannot be
        trusted. False while the file is rebuilt in the background (the database answers)."""
        if self._healer.running:
            return False
        log_seq = self.source.max_seq(self.db)
        applied = self._applied_seq_unlocked()
        if applied == log_seq:  # ahead of the log is a file from another point in history
            return True
        self._refuse_ahead(applied, log_seq)
        with self._thread_lock, self._flock(exclusive=True):
            return self._follow_locked()

    def _follow_locked(self) -> bool:
        """Under the thread lock and the exclusive lock: bring the file current, or rebuild it
        (`_rebuild_or_defer`'s answer)."""
        handle, applied, problem = self._open_for_update()
        if handle is None:
            return self._rebuild_or_defer(problem)
        try:
            changes = self.source.changes_since(self.db, self.table, applied)
            # Entries after `applied` trimmed by another host's process (PostgreSQL).
            problem = (
                "log entries it has not applied were trimmed"
                if changes.lost
                else self._apply(handle, changes)
            )
        finally:
            self._close_update(handle)
        if problem:
            return self._rebuild_or_defer(problem)
        self._maybe_trim(changes.max_seq)
        return True

    def _rebuild_or_defer(self, reason: str) -> bool:
        """Under the exclusive lock: rebuild now a small table, or any where the database has
        nothing to answer with meanwhile (True); else start the background rebuild (False: no
        call waits for it)."""
        if not self._background or self._small():
            self._log.info("rebuilding %s: %s", self.path.name, reason)
            self._rebuild_locked()
            return True
        self._deferring()
        self._healer.start(reason, damaged=False)
        return False

    def _maybe_trim(self, applied: int) -> None:
        # The log only needs entries the file has not applied; forget the rest now and then.
        # Not from inside a read snapshot: a trim is a write (on PostgreSQL a second pooled
        # connection beside the pinned one); the next sync outside one trims.
        # `keep_log` is the log's to apply (change_log.py): positions are opaque here, and on
        # PostgreSQL a horizon minus a count of entries is no position at all (it read as a
        # seq beyond every entry, and one host's trim took the entries the others still
        # needed, tests/vectors/test_pg_two_servers.py).
        if applied - self._trimmed_upto >= self.trim_every and not self.db.in_snapshot():
            self.source.trim_log(self.db, self.table, applied, self._keep_log)
            self._trimmed_upto = applied

    def after_write(self) -> None:
        """Bring the file current after a write this process committed (the engine calls it
        for every index, whatever its kind). The vector file follows the log here; a kind
        whose file is only worth following once it is read (the full-text index's in-memory
        core) overrides it."""
        self.sync()

    # -- rebuild -----------------------------------------------------------------------------

    def rebuild(self, progress: Progress | None = None) -> int:
        """Rewrite the file from the database; returns the number of rows indexed."""
        with self._thread_lock, self._flock(exclusive=True):
            return self._rebuild_locked(progress)

    def _small(self) -> bool:
        """Whether the table is small enough to rebuild inside the call (read at each call:
        the tests lower `healing.INLINE_ROWS`)."""
        return not self._more_rows_than(healing.INLINE_ROWS)

    def _rebuild_locked(self, progress: Progress | None = None) -> int:
        self._remove_stale_temporaries()
        tmp = self.path.with_name(f"{self.path.name}.tmp{os.getpid()}")
        try:
            built = self._build(tmp, progress, online=False)
            self._install(tmp, built)
        except BaseException:
            # A full disk or an obstruction: the old file stays as it was, and no half-written
            # temporary is left to hold the space.
            self._discard(tmp)
            raise
        return self._built_rows(built)

    def _rebuild_online(self, step: Progress) -> int:
        """The background rebuild (`Healer`), which holds the exclusive lock only to catch up
        and swap: the rows are written into `<file>.heal<pid>` without it, as of the log
        position read first; then, under the lock, what was logged meanwhile is applied to
        that file and it is renamed in. Returns the rows it holds. A failure or a stop (`step`
        raises) at any point removes the private file: the index file stays what it was (or
        absent), never half-written."""
        tmp = self.path.with_name(f"{self.path.name}.heal{os.getpid()}")
        try:
            built = self._build(tmp, step, online=True)
            with self._thread_lock, self._flock(exclusive=True):
                seq = self._built_seq(built)
                caught: B | None = None
                # Entries it needs trimmed meanwhile (by this host, or by another host's
                # process on PostgreSQL): rebuilt under the lock, as a sync would.
                if not self._history_problem(seq):
                    changes = self.source.changes_since(self.db, self.table, seq)
                    if not changes.lost:
                        caught = self._catch_up(tmp, built, changes)
                if caught is None:
                    self._discard(tmp)
                    return self._rebuild_locked()
                self._install(tmp, caught)
                return self._built_rows(caught)
        except BaseException:
            self._discard(tmp)
            raise

    def _install(self, tmp: Path, built: B) -> None:
        """Under the exclusive lock: rename a complete file and its sidecar over the index (a
        reader never sees one without the other; a crash between them leaves a pair the checks
        refuse, so the next use rebuilds)."""
        unobstructed(lambda: os.replace(tmp, self.path))
        os.replace(self._sidecar(tmp), self._sidecar(self.path))
        self._installed(built)

    def _discard(self, tmp: Path) -> None:
        tmp.unlink(missing_ok=True)
        self._sidecar(tmp).unlink(missing_ok=True)

    def _remove_stale_temporaries(self) -> None:
        # A rebuild's `.tmp<pid>` exists only while its writer holds the exclusive lock, which
        # we hold now: any found were left by a process that died.
        name = glob.escape(self.path.name)
        stale = [*self.path.parent.glob(name + ".tmp*"), *self._stale_extra()]
        # A background rebuild writes without the lock, so its file is stale only once its
        # process is gone.
        for path in self.path.parent.glob(name + ".heal*"):
            if healing.orphaned(path.name[len(self.path.name) :]):
                stale.append(path)
        for path in stale:
            path.unlink(missing_ok=True)

    # -- healing -----------------------------------------------------------------------------

    @property
    def healing(self) -> bool:
        """Whether a background rebuild is running (or waiting for another process's) in this
        process; the database answers meanwhile."""
        return self._healer.running

    def heal_in_background(self, reason: str) -> bool:
        """Rebuild the damaged file in a background thread; False when one already runs here."""
        self._deferring()
        return self._healer.start(reason)

    def wait_for_healing(self, timeout: float | None = None) -> None:
        """Return once the background rebuild (if any) has finished (or `timeout` passed)."""
        self._healer.wait(timeout)

    # -- inspection --------------------------------------------------------------------------

    def _status_parts(self) -> tuple[H | None, str, int, RebuildProgress | None]:
        """For `status`: the usable file's header (None when unusable), the reason ("current",
        "behind the log", or why it is unusable), the log's seq and the running rebuild."""
        rebuild = healing.progress_of(self.path)
        log_seq = self.source.max_seq(self.db)
        with self._flock(exclusive=False):
            header, problem = self._trusted()
        if header is None or problem:
            return None, problem, log_seq, rebuild
        applied = self._fields(header).applied_seq
        return header, "current" if applied >= log_seq else "behind the log", log_seq, rebuild

    def lag(self) -> int | None:
        """Log entries the file has not applied yet, read without a lock (a gauge, not a
        promise); None while the file is missing or cannot be trusted."""
        applied = self._applied_seq_unlocked()
        return None if applied is None else max(0, self.source.max_seq(self.db) - applied)

    def close(self) -> None:
        # A rebuild still writing its file while the interpreter finalises can crash the
        # process: it stops at its next step, its file removed.
        self._healer.stop(timeout=120.0)
        self._release()
        if self._tmp is not None:
            self._tmp.cleanup()
