"""VectorIndex: one table's index file, kept current with SQLite by the server itself.

SQLite is the truth. Triggers log every write that can move a row in or out of the index into
`vector_log` (see storage/schema.py). Before each scan, `sync()` compares the file's
`applied_seq` with the log and applies what is missing under an exclusive `flock`, marking the
file `dirty` while it mutates; a file that is missing, corrupt, dirty (a writer died) or
foreign (another database's) is rebuilt from SQLite: inside the call for a small table, else
in the background (healing.py) while scans read SQLite. Scans run under a shared lock. So any
number of processes on one database see the same, current index, and a crash at any point is
repaired on the next read. The file format is docs/vector-index.md.

An empty directory where the index or its lock file belongs is removed before use (issue 11);
one with contents is not ours to delete: `IndexObstructed` says so, and scans read SQLite.
"""

from __future__ import annotations

import fcntl
import glob
import logging
import os
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from cpersona.errors import AheadOfSnapshot, IndexObstructed, StoreCorrupt
from cpersona.storage import Store
from cpersona.storage import embeddings as vector_sql
from cpersona.storage.embeddings import IndexRow
from cpersona.vectors import checksums, healing
from cpersona.vectors.format import (
    FLAG_DELETED,
    HEADER_DTYPE,
    HEADER_LEN,
    MAGIC,
    VERSION,
    Layout,
    VectorFileWriter,
)
from cpersona.vectors.healing import RebuildProgress
from cpersona.vectors.slots import (
    HEADROOM,
    TABLE_CODES,
    append_row,
    compare_slot,
    live_slots,
    release,
)
from cpersona.yielding import CallActivity

log = logging.getLogger("cpersona.vectors")

_T = TypeVar("_T")

#: Rebuild instead of growing when at least this share of slots is deleted.
COMPACT_RATIO = 0.5
#: Applied log entries of a table kept before they are deleted.
TRIM_EVERY = 5000

Progress = Callable[[int, int], None]


def index_file(db_path: str | Path, table: str) -> Path:
    """The index file of `table` beside the database file at `db_path`."""
    return Path(f"{db_path}.{table}.vec")


@dataclass(frozen=True, slots=True)
class IndexStatus:
    """What `cpersona index status` reports for one table."""

    table: str
    path: str
    exists: bool
    usable: bool
    reason: str
    dim: int
    count: int
    live: int
    applied_seq: int
    log_seq: int
    #: The background rebuild running on this host, if any.
    rebuild: RebuildProgress | None = None


class VectorIndex:
    """The index of one table (`memories` or `episodes`) of one database."""

    def __init__(
        self,
        db: Store,
        table: str,
        base: Path | None = None,  # the file is `<base>.<table>.vec` (default: the database's)
        activity: CallActivity | None = None,
        keep_log: int = 0,  # applied log entries left untrimmed, for other hosts' files
    ) -> None:
        """`activity`: the tool calls a background rebuild gives way to (yielding.py)."""
        if table not in TABLE_CODES:
            raise ValueError(f"no vector index for table {table!r}")
        self.db = db
        self.table = table
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        if db.is_memory:
            # An in-memory database keeps its index in a private temporary directory.
            self._tmp = tempfile.TemporaryDirectory(prefix="cpersona-vec-")
            base = Path(self._tmp.name) / "memory.db"
        elif base is None:
            base = Path(db.path)
        self.path, self._keep_log = index_file(base, table), keep_log
        self.lock_path = Path(f"{self.path}.lock")
        self._thread_lock = threading.Lock()
        self._db_uid: bytes | None = None
        self._trimmed_upto = 0
        #: The kernel's mapping of the file, its checksums, and the identity they were opened
        #: for (kernel_handle).
        self._handle: tuple[tuple[object, ...], tuple[Any, np.ndarray]] | None = None
        #: The background rebuild of a file found damaged, missing or stale (healing.py).
        self._healer = healing.Healer(
            self.path,
            lambda step: healing.rebuild_online(self, step),
            log,
            needed=self._rebuild_reason,
            activity=activity,
        )

    # -- locking -----------------------------------------------------------------------------

    @contextmanager
    def _flock(self, exclusive: bool) -> Iterator[None]:
        # flock is per open file description, so threads of one process take the thread lock
        # first for exclusive work (two threads must not both mutate through one process).
        fd = _unobstructed(lambda: os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o600))
        try:
            fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    @contextmanager
    def reading(self) -> Iterator[Path | None]:
        """Bring the index current, then hold the shared lock while the caller scans the file;
        None while it is rebuilt in the background (the caller reads SQLite).

        Raises AheadOfSnapshot inside a read snapshot the file has moved past."""
        if not self.sync():
            yield None
            return
        with self._flock(exclusive=False):
            yield self.path

    def kernel_handle(self, open_file: Callable[[str], Any]) -> tuple[Any, np.ndarray]:
        """`open_file(path)` (a kernel's `VectorIndex.open`: a read-only mapping of the file)
        and the file's content checksums (a read-only mapping of its sidecar, for the scan's
        `sums`), reused from the last call while that is still right; call it inside
        `reading()`, whose shared lock the scan needs anyway.

        A new mapping is checked whole before it is used: every slot's checksum, and that the
        scan order is a permutation (StoreCorrupt otherwise). The scans then check each slot
        they score, so damage done after the mapping was made is caught when it would count.

        The mapping is kept while the file is the same file (mapping anew per scan faulted in
        every page again: 27 ms instead of 12 for a far scan of 200,000 x 384 rows,
        docs/performance.md). Safe because writers change a file in place only under the
        exclusive lock and the kernels read `count`, `order` and the flags live; a rebuild or a
        growth renames a new file in (a new inode), and other header changes are damage `sync`
        has just rebuilt. It is reopened when the inode, size, those fields or kernel differ.
        """
        fd = os.open(self.path, os.O_RDONLY)
        try:
            st = os.fstat(fd)
            head = os.pread(fd, HEADER_LEN, 0)
        finally:
            os.close(fd)
        sums_st = os.stat(checksums.sums_path(self.path))
        # magic, version, dim | capacity | db_uid, table: what a reader fixes at open.
        key = (open_file, st.st_dev, st.st_ino, st.st_size, head[:16], head[24:32], head[40:60])
        key += (sums_st.st_ino, sums_st.st_size)
        cached = self._handle
        if cached is not None and cached[0] == key:
            return cached[1]
        self._handle = None  # let the old mapping go before making the new one
        handle = open_file(str(self.path))
        problem = checksums.problem(self.path, handle.table, handle.capacity, handle.db_uid)
        if problem:
            raise StoreCorrupt(f"corrupt vector file: {problem}")
        sums = checksums.open_read(self.path, handle.capacity)
        dim, capacity = handle.dim, handle.capacity
        problem = healing.content_problem(self.path, dim, capacity, handle.count, sums)
        if problem:
            raise StoreCorrupt(f"corrupt vector file: {problem}")
        self._handle = (key, (handle, sums))
        return handle, sums

    # -- sync --------------------------------------------------------------------------------

    def db_uid(self) -> bytes:
        if self._db_uid is None:
            self._db_uid = vector_sql.db_uid(self.db)
        return self._db_uid

    def sync(self) -> bool:
        """Apply every logged write the file has not seen; rebuild a file that cannot be
        trusted. False while the file is rebuilt in the background (scans read SQLite)."""
        if self._healer.running:
            return False
        log_seq = vector_sql.max_seq(self.db)
        applied = self._applied_seq_unlocked()
        if applied == log_seq:  # ahead of the log is a file from another point in history
            return True
        if applied is not None and applied > log_seq and self.db.in_snapshot():
            raise AheadOfSnapshot(f"{self.path.name} applied {applied}, the snapshot {log_seq}")
        with self._thread_lock, self._flock(exclusive=True):
            writer, reason = self._open_trusted()
            if writer is None:
                return self._rebuild_or_defer(reason)
            try:
                caught_up = self._apply_locked(writer)
            finally:
                release(writer)
            if not caught_up:
                return self._rebuild_or_defer("half its slots are deleted, or a first width")
            self._maybe_trim(log_seq)
            return True

    def _rebuild_or_defer(self, reason: str) -> bool:
        """Under the exclusive lock: rebuild a small table now (True), start the background
        rebuild of a larger one (False: no call waits for it)."""
        if not vector_sql.embedded_more_than(self.db, self.table, healing.INLINE_ROWS):
            log.info("rebuilding %s: %s", self.path.name, reason)
            self._rebuild_locked()
            return True
        self._handle = None
        self._healer.start(reason, damaged=False)
        return False

    def _rebuild_reason(self) -> str:
        """Why the file needs a rebuild ("" = it is sound): asked by a background rebuild
        that waited for another process's."""
        with self._flock(exclusive=False):
            writer, reason = self._open_trusted()
            if writer is not None:
                release(writer)
            return reason

    def _maybe_trim(self, applied: int) -> None:
        # Not from inside a read snapshot: a trim is a write (a second pooled connection).
        upto = applied - self._keep_log
        if upto - self._trimmed_upto >= TRIM_EVERY and not self.db.in_snapshot():
            vector_sql.trim_log(self.db, self.table, upto)
            self._trimmed_upto = upto

    def _applied_seq_unlocked(self) -> int | None:
        """The file's applied_seq read without the lock (a hint: sync re-checks under lock)."""
        header, problem = self._inspect()
        return None if header is None or problem else int(header["applied_seq"])

    def _inspect(self) -> tuple[np.void | None, str]:
        """The file's header and why the file cannot be trusted ("" = it can), read with plain
        file reads: every check of docs/vector-index.md that needs no mapping, so that a short,
        oversized or garbled file is reported instead of failing to map."""
        try:
            with open(self.path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                raw = f.read(HEADER_LEN)
        except FileNotFoundError:
            return None, "missing"
        except IsADirectoryError:
            return None, "a directory stands where the file belongs"
        except OSError as exc:
            return None, f"unreadable ({exc})"
        if len(raw) < HEADER_LEN:
            return None, f"truncated ({size} bytes, shorter than the header)"
        header = np.frombuffer(raw, dtype=HEADER_DTYPE)[0]
        dim, count, capacity = int(header["dim"]), int(header["count"]), int(header["capacity"])
        if bytes(header["magic"]) != MAGIC:
            return header, "not a cpersona vector file (wrong magic)"
        if int(header["version"]) != VERSION:
            return header, f"unsupported version {int(header['version'])}"
        if dim < 1:
            return header, "dim is 0"
        if count > capacity:
            return header, "count exceeds capacity"
        expected = Layout.of(dim, capacity).file_len
        if size != expected:
            return header, f"size {size} != {expected}"
        if int(header["dirty"]):
            return header, "a writer stopped mid-update"
        if bytes(header["db_uid"]) != self.db_uid():
            return header, "it belongs to another database"
        if int(header["table"]) != TABLE_CODES[self.table]:
            return header, "it indexes another table"
        problem = checksums.problem(self.path, int(header["table"]), capacity, self.db_uid())
        if problem:
            return header, problem
        return header, ""

    def _open_trusted(self) -> tuple[VectorFileWriter | None, str]:
        header, problem = self._inspect()
        if header is not None and not problem:
            problem = self._history_problem(int(header["applied_seq"]))
        if problem:
            return None, problem
        try:
            writer = VectorFileWriter(self.path)
        except (OSError, ValueError, TypeError) as exc:  # changed since _inspect (not by us)
            return None, f"unreadable ({exc})"
        count = writer.count
        if count and int(writer.view("order").max()) >= count:
            release(writer)
            return None, "its scan order names a slot beyond count"
        return writer, ""

    def _history_problem(self, applied_seq: int) -> str:
        """Whether this database's log can bring a file that has applied `applied_seq` current.

        Under either lock, a trusted file has applied at most the log's high-water mark and at
        least what was trimmed (a trim follows an apply), so neither test can fire on a file
        this database's own syncs wrote."""
        if applied_seq > vector_sql.max_seq(self.db):
            if self.db.in_snapshot():  # synced meanwhile by another thread or process
                raise AheadOfSnapshot(f"{self.path.name} applied {applied_seq}")
            return "it is ahead of this database's log (a database restored from a backup?)"
        if applied_seq < vector_sql.trimmed_upto(self.db, self.table):
            return "log entries it has not applied were trimmed"
        return ""

    def _apply_locked(self, writer: VectorFileWriter) -> bool:
        """Apply the logged writes to `writer`'s file; False (nothing applied) when the table
        must be rebuilt instead (a compaction, or a first row of another width)."""
        header = writer.header()
        changes = vector_sql.changes_since(self.db, self.table, header.applied_seq)
        if changes.row_ids:
            rows = vector_sql.rows_by_id(self.db, self.table, changes.row_ids)
            if self._needs_rebuild(writer, rows, changes.row_ids):
                return False
            writer.set_header(dirty=1)
            slots = live_slots(writer, changes.row_ids)
            sums = checksums.SumWriter(writer)
            try:
                for row_id in changes.row_ids:
                    self._apply_row(writer, sums, slots, row_id, rows.get(row_id))
            finally:
                sums.release()
        writer.set_header(applied_seq=changes.max_seq, dirty=0)
        return True

    def _needs_rebuild(
        self, writer: VectorFileWriter, rows: dict[int, IndexRow], row_ids: list[int]
    ) -> bool:
        header = writer.header()
        if header.count == 0 and rows:
            # An empty file's width was a guess; let the rows decide it.
            widths = {len(r.embedding) // 4 for r in rows.values()}
            return header.dim not in widths
        deleted = header.count - header.live
        return header.count > 4 * HEADROOM and deleted >= COMPACT_RATIO * header.count

    def _apply_row(
        self,
        writer: VectorFileWriter,
        sums: checksums.SumWriter,
        slots: dict[int, int],
        row_id: int,
        row: IndexRow | None,
    ) -> None:
        """Make the file agree with SQLite about one row (idempotent)."""
        old = slots.pop(row_id, None)
        if old is not None:
            writer.set_deleted(old)
        if row is not None:
            slots[row_id] = append_row(writer, row, HEADROOM, sums)

    # -- rebuild -----------------------------------------------------------------------------

    def rebuild(self, progress: Progress | None = None) -> int:
        """Rewrite the file from SQLite; returns the number of rows indexed."""
        with self._thread_lock, self._flock(exclusive=True):
            return self._rebuild_locked(progress)

    def _rebuild_locked(self, progress: Progress | None = None) -> int:
        self._remove_stale_temporaries()
        log_seq = vector_sql.max_seq(self.db)
        total, dim = vector_sql.embedded_shape(self.db, self.table)
        tmp = self.path.with_name(self.path.name + f".tmp{os.getpid()}")
        done = 0
        try:
            writer = VectorFileWriter.create(
                tmp, dim or 1, total + HEADROOM, self.db_uid(), TABLE_CODES[self.table]
            )
            try:
                # Newest first, so each append lands at the end of the order (no shifting).
                for row in vector_sql.iter_rows(self.db, self.table):
                    append_row(writer, row, HEADROOM)
                    done += 1
                    if progress is not None and done % 10_000 == 0:
                        progress(done, total)
                writer.set_header(applied_seq=log_seq, dirty=0)
                writer.flush()
                checksums.write(writer)
            finally:
                release(writer)
            os.chmod(tmp, 0o600)
            self._install(tmp)
        except BaseException:
            # A full disk or an obstruction: the old file stays as it was, and no half-written
            # temporary is left to hold the space.
            healing.remove_with_sums(tmp)
            raise
        if progress is not None:
            progress(done, total)
        return done

    def _install(self, tmp: Path) -> None:
        """Rename a complete file and its checksums over the index (under the exclusive lock:
        a reader never sees one without the other; a crash between them leaves a pair that
        `_inspect` refuses, so the next use rebuilds)."""
        _unobstructed(lambda: os.replace(tmp, self.path))
        os.replace(checksums.sums_path(tmp), checksums.sums_path(self.path))
        self._handle = None

    # -- healing -----------------------------------------------------------------------------

    @property
    def healing(self) -> bool:
        """Whether a background rebuild is running (or waiting for another process's) in this
        process; scans read SQLite meanwhile."""
        return self._healer.running

    def heal_in_background(self, reason: str) -> bool:
        """Rebuild the damaged file in a background thread (`healing.rebuild_online`); False
        when one is already running here."""
        self._handle = None
        return self._healer.start(reason)

    def wait_for_healing(self, timeout: float | None = None) -> None:
        """Return once the background rebuild (if any) has finished (or `timeout` passed)."""
        self._healer.wait(timeout)

    def _remove_stale_temporaries(self) -> None:
        # A rebuild's `.tmp<pid>` and a grow's `.grow` file exist only while their writer holds
        # the exclusive lock, which we hold now: any found were left by a process that died.
        stale = list(self.path.parent.glob(glob.escape(self.path.name) + ".tmp*"))
        stale.append(self.path.with_name(self.path.name + ".grow"))
        stale.append(checksums.sums_path(self.path).with_name(f"{self.path.name}.sum.new"))
        # A background rebuild writes without the lock, so its file is stale only once its
        # process is gone.
        for path in self.path.parent.glob(glob.escape(self.path.name) + ".heal*"):
            if healing.orphaned(path.name[len(self.path.name) :]):
                stale.append(path)
        for path in stale:
            path.unlink(missing_ok=True)

    # -- inspection --------------------------------------------------------------------------

    def status(self) -> IndexStatus:
        rebuild = healing.progress_of(self.path)
        log_seq = vector_sql.max_seq(self.db)
        with self._flock(exclusive=False):
            writer, reason = self._open_trusted()
            if writer is None:
                return IndexStatus(
                    self.table,
                    str(self.path),
                    self.path.exists(),
                    False,
                    reason,
                    0,
                    0,
                    0,
                    0,
                    log_seq,
                    rebuild,
                )
            try:
                h = writer.header()
                reason = "current" if h.applied_seq >= log_seq else "behind the log"
                return IndexStatus(
                    self.table,
                    str(self.path),
                    True,
                    True,
                    reason,
                    h.dim,
                    h.count,
                    h.live,
                    h.applied_seq,
                    log_seq,
                    rebuild,
                )
            finally:
                release(writer)

    def lag(self) -> int | None:
        """Log entries the file has not applied yet, read without a lock (a gauge, not a
        promise); None while the file is missing or cannot be trusted."""
        applied = self._applied_seq_unlocked()
        return None if applied is None else max(0, vector_sql.max_seq(self.db) - applied)

    def verify(self) -> list[str]:
        """Compare every row of the index with SQLite; the differences found (empty = same).
        A rebuild the file needs first is waited for."""
        if not self.sync():
            self.wait_for_healing()
        reason = ""
        for attempt in range(2):
            with self._flock(exclusive=False):
                writer, reason = self._open_trusted()
                if writer is not None:
                    try:
                        return self._compare(writer)
                    finally:
                        release(writer)
            if attempt == 0:
                # Damage the header does not show (the scan order): rebuilt as a scan would.
                log.info("rebuilding %s: %s", self.path.name, reason)
                self.rebuild()
        return [f"{self.table}: index unusable: {reason}"]

    def _compare(self, writer: VectorFileWriter) -> list[str]:
        problems: list[str] = []
        ids = writer.view("ids")
        flags = writer.view("flags")
        live_slots = [s for s in range(writer.count) if not flags[s] & FLAG_DELETED]
        live = {int(ids[s]): s for s in live_slots}
        if len(live) != len(live_slots):
            problems.append(f"{self.table}: {len(live_slots) - len(live)} rows have two live slots")
        if writer.header().live != len(live_slots):
            problems.append(
                f"{self.table}: header counts {writer.header().live} live slots, "
                f"the flags {len(live_slots)}"
            )
        seen = 0
        for row in vector_sql.iter_rows(self.db, self.table):
            seen += 1
            slot = live.pop(row.id, None)
            if slot is None:
                problems.append(f"{self.table} {row.id}: in SQLite, missing from the index")
                continue
            problems.extend(compare_slot(writer, slot, row, self.table))
        for row_id in sorted(live):
            problems.append(f"{self.table} {row_id}: in the index, not an embedded row in SQLite")
        order = writer.view("order")
        if not np.array_equal(np.sort(order), np.arange(writer.count)):
            problems.append(f"{self.table}: scan order is not a permutation of the slots")
        keys, idv = writer.view("keys"), writer.view("ids")
        pairs = [(int(keys[s]), int(idv[s])) for s in order]
        if pairs != sorted(pairs, reverse=True):
            problems.append(f"{self.table}: scan order is not (created_at DESC, id DESC)")
        sums = checksums.open_read(self.path, writer.capacity)
        wrong = np.flatnonzero(
            checksums.slot_sums(writer._views, slice(0, writer.count)) != sums[: writer.count]
        )
        problems.extend(f"{self.table} {int(idv[s])}: content checksum differs" for s in wrong[:20])
        if wrong.shape[0] > 20:
            problems.append(f"{self.table}: {wrong.shape[0] - 20} more checksums differ")
        return problems

    def close(self) -> None:
        # A rebuild still writing its mapped file while the interpreter finalises can crash
        # the process (as the warm-up could): it stops at its next step, its file removed.
        self._healer.stop(timeout=120.0)
        self._handle = None
        if self._tmp is not None:
            self._tmp.cleanup()


def _unobstructed(act: Callable[[], _T]) -> _T:
    """`act()` on a path of ours (the index file, its lock file); an empty directory standing
    there is removed and `act` tried once more, one with contents is `IndexObstructed`."""
    try:
        return act()
    except IsADirectoryError as exc:
        path = Path(exc.filename2 or exc.filename)
    try:
        path.rmdir()
    except FileNotFoundError:
        pass
    except OSError:
        raise _obstructed(path) from None
    else:
        log.warning("removed an empty directory that stood where %s belongs", path.name)
    try:
        return act()
    except IsADirectoryError:  # it came back between the two tries
        raise _obstructed(path) from None


def _obstructed(path: Path) -> IndexObstructed:
    return IndexObstructed(
        f"{path} is a directory with contents, where cpersona's index keeps a file; "
        "cpersona does not delete it: move it away, and the index is rebuilt on the next use "
        "(recall reads SQLite until then)"
    )
