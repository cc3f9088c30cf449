"""VectorIndex: one table's index file, kept current with SQLite by the server itself.

SQLite is the truth. Triggers log every write that can move a row in or out of the index into
`vector_log` (see storage/schema.py). Before each scan, `sync()` compares the file's
`applied_seq` with the log and applies what is missing under an exclusive `flock`, marking the
file `dirty` while it mutates; a file that is missing, corrupt, dirty (a writer died) or
foreign (another database's) is rebuilt from SQLite. Scans run under a shared lock. So any
number of processes on one database see the same, current index, and a crash at any point is
repaired on the next read. The file format is docs/vector-index.md.

The index file and its lock file are cpersona's: an empty directory in either place (issue 11:
`index verify` failed forever, the lock path crashed it) is removed before use. A directory
with contents is not ours to delete: `IndexObstructed` says so, and scans read SQLite.
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

from cpersona.errors import IndexObstructed
from cpersona.storage import Database
from cpersona.storage import vectors as vector_sql
from cpersona.storage.vectors import IndexRow
from cpersona.vectors.format import (
    FLAG_DELETED,
    HEADER_DTYPE,
    HEADER_LEN,
    MAGIC,
    TABLE_EPISODES,
    TABLE_MEMORIES,
    VERSION,
    Layout,
    VectorFileWriter,
    scope_hash,
)

log = logging.getLogger("cpersona.vectors")

_T = TypeVar("_T")

TABLE_CODES = {"memories": TABLE_MEMORIES, "episodes": TABLE_EPISODES}
#: Slots allocated by a rebuild beyond the rows it writes, so the next writes need no growth.
HEADROOM = 1024
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


class VectorIndex:
    """The index of one table (`memories` or `episodes`) of one database."""

    def __init__(self, db: Database, table: str, directory: str | None = None) -> None:
        if table not in TABLE_CODES:
            raise ValueError(f"no vector index for table {table!r}")
        self.db = db
        self.table = table
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        if db.is_memory:
            # An in-memory database keeps its index in a private temporary directory.
            self._tmp = tempfile.TemporaryDirectory(prefix="cpersona-vec-")
            base = Path(self._tmp.name) / "memory.db"
        else:
            base = Path(directory) / Path(db.path).name if directory else Path(db.path)
        self.path = index_file(base, table)
        self.lock_path = Path(f"{self.path}.lock")
        self._thread_lock = threading.Lock()
        self._db_uid: bytes | None = None
        self._trimmed_upto = 0
        #: The kernel's mapping of the file and the identity it was opened for (kernel_handle).
        self._handle: tuple[tuple[object, ...], Any] | None = None

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
    def reading(self) -> Iterator[Path]:
        """Bring the index current, then hold the shared lock while the caller scans the file."""
        self.sync()
        with self._flock(exclusive=False):
            yield self.path

    def kernel_handle(self, open_file: Callable[[str], Any]) -> Any:
        """`open_file(path)` (a kernel's `VectorIndex.open`: a read-only mapping of the file),
        reused from the last call while that is still right; call it inside `reading()`, whose
        shared lock the scan needs anyway.

        The mapping is kept from one scan to the next while the file is the same file. Mapping
        it anew for every scan made every scan fault in again each page it read, from the page
        cache: a far scan of 200,000 x 384 rows took 27 ms instead of 12 (docs/performance.md).
        Keeping it is safe because writers change a file in place only under the exclusive
        lock, and the kernels read `count`, `order` and the flags live from the mapping and
        check them as they walk; a rebuild or a growth renames a new file in (a new inode; the
        old one cannot be reused while mapped), and anything else that changes the fixed header
        fields is damage that `sync` has just rebuilt. The handle is reopened whenever the
        inode, the size, those fields or the kernel differ.
        """
        fd = os.open(self.path, os.O_RDONLY)
        try:
            st = os.fstat(fd)
            head = os.pread(fd, HEADER_LEN, 0)
        finally:
            os.close(fd)
        # magic, version, dim | capacity | db_uid, table: what a reader fixes at open.
        key = (open_file, st.st_dev, st.st_ino, st.st_size, head[:16], head[24:32], head[40:60])
        cached = self._handle
        if cached is not None and cached[0] == key:
            return cached[1]
        self._handle = None  # let the old mapping go before making the new one
        handle = open_file(str(self.path))
        self._handle = (key, handle)
        return handle

    # -- sync --------------------------------------------------------------------------------

    def db_uid(self) -> bytes:
        if self._db_uid is None:
            self._db_uid = vector_sql.db_uid(self.db)
        return self._db_uid

    def sync(self) -> None:
        """Apply every logged write the file has not seen; rebuild a file that cannot be trusted."""
        log_seq = vector_sql.max_seq(self.db)
        applied = self._applied_seq_unlocked()
        if applied == log_seq:  # ahead of the log is a file from another point in history
            return
        with self._thread_lock, self._flock(exclusive=True):
            writer, reason = self._open_trusted()
            if writer is None:
                log.info("rebuilding %s: %s", self.path.name, reason)
                self._rebuild_locked()
                return
            try:
                self._apply_locked(writer)
            finally:
                _release(writer)
            self._maybe_trim(log_seq)

    def _maybe_trim(self, applied: int) -> None:
        # The log only needs entries the file has not applied; forget the rest now and then.
        if applied - self._trimmed_upto >= TRIM_EVERY:
            vector_sql.trim_log(self.db, self.table, applied)
            self._trimmed_upto = applied

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
            _release(writer)
            return None, "its scan order names a slot beyond count"
        return writer, ""

    def _history_problem(self, applied_seq: int) -> str:
        """Whether this database's log can bring a file that has applied `applied_seq` current.

        Under either lock, a trusted file has applied at most the log's high-water mark and at
        least what was trimmed (a trim follows an apply), so neither test can fire on a file
        this database's own syncs wrote."""
        if applied_seq > vector_sql.max_seq(self.db):
            return "it is ahead of this database's log (a database restored from a backup?)"
        if applied_seq < vector_sql.trimmed_upto(self.db, self.table):
            return "log entries it has not applied were trimmed"
        return ""

    def _apply_locked(self, writer: VectorFileWriter) -> None:
        header = writer.header()
        changes = vector_sql.changes_since(self.db, self.table, header.applied_seq)
        if changes.row_ids:
            rows = vector_sql.rows_by_id(self.db, self.table, changes.row_ids)
            if self._needs_rebuild(writer, rows, changes.row_ids):
                _release(writer)
                self._rebuild_locked()
                return
            writer.set_header(dirty=1)
            slots = _live_slots(writer, changes.row_ids)
            for row_id in changes.row_ids:
                writer = self._apply_row(writer, slots, row_id, rows.get(row_id))
        writer.set_header(applied_seq=changes.max_seq, dirty=0)

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
        slots: dict[int, int],
        row_id: int,
        row: IndexRow | None,
    ) -> VectorFileWriter:
        """Make the file agree with SQLite about one row (idempotent)."""
        old = slots.pop(row_id, None)
        if old is not None:
            writer.set_deleted(old)
        if row is None:
            return writer
        slots[row_id] = _append(writer, row)
        return writer

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
                    _append(writer, row)
                    done += 1
                    if progress is not None and done % 10_000 == 0:
                        progress(done, total)
                writer.set_header(applied_seq=log_seq, dirty=0)
                writer.flush()
            finally:
                _release(writer)
            os.chmod(tmp, 0o600)
            _unobstructed(lambda: os.replace(tmp, self.path))
        except BaseException:
            # A full disk or an obstruction: the old file stays as it was, and no half-written
            # temporary is left to hold the space.
            tmp.unlink(missing_ok=True)
            raise
        self._handle = None
        if progress is not None:
            progress(done, total)
        return done

    def _remove_stale_temporaries(self) -> None:
        # A rebuild's `.tmp<pid>` and a grow's `.grow` file exist only while their writer holds
        # the exclusive lock, which we hold now: any found were left by a process that died.
        stale = list(self.path.parent.glob(glob.escape(self.path.name) + ".tmp*"))
        stale.append(self.path.with_name(self.path.name + ".grow"))
        for path in stale:
            path.unlink(missing_ok=True)

    # -- inspection --------------------------------------------------------------------------

    def status(self) -> IndexStatus:
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
                )
            finally:
                _release(writer)

    def lag(self) -> int | None:
        """Log entries the file has not applied yet, read without a lock (a gauge, not a
        promise); None while the file is missing or cannot be trusted."""
        applied = self._applied_seq_unlocked()
        return None if applied is None else max(0, vector_sql.max_seq(self.db) - applied)

    def verify(self) -> list[str]:
        """Compare every row of the index with SQLite; the differences found (empty = same)."""
        self.sync()
        reason = ""
        for attempt in range(2):
            with self._flock(exclusive=False):
                writer, reason = self._open_trusted()
                if writer is not None:
                    try:
                        return self._compare(writer)
                    finally:
                        _release(writer)
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
            problems.extend(_compare_slot(writer, slot, row, self.table))
        for row_id in sorted(live):
            problems.append(f"{self.table} {row_id}: in the index, not an embedded row in SQLite")
        order = writer.view("order")
        if not np.array_equal(np.sort(order), np.arange(writer.count)):
            problems.append(f"{self.table}: scan order is not a permutation of the slots")
        keys, idv = writer.view("keys"), writer.view("ids")
        pairs = [(int(keys[s]), int(idv[s])) for s in order]
        if pairs != sorted(pairs, reverse=True):
            problems.append(f"{self.table}: scan order is not (created_at DESC, id DESC)")
        return problems

    def close(self) -> None:
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


def _vector(embedding: bytes) -> np.ndarray:
    """A row's BLOB as float32; one that is not whole floats gives an empty (foreign) vector."""
    if len(embedding) % 4:
        return np.empty(0, dtype="<f4")
    return np.frombuffer(embedding, dtype="<f4")


def _append(writer: VectorFileWriter, row: IndexRow) -> int:
    if writer.count >= writer.capacity:  # a rebuild also grows: rows may arrive after its count
        writer.grow(max(2 * writer.capacity, writer.capacity + HEADROOM))
    vector = _vector(row.embedding)
    return writer.append(
        row.id,
        row.key,
        time=row.time,
        agent=scope_hash(row.agent_id),
        project=scope_hash(row.project_id),
        channel=scope_hash(row.channel),
        source=0 if row.source_id is None else scope_hash(row.source_id),
        vector=vector,
    )


def _live_slots(writer: VectorFileWriter, row_ids: list[int]) -> dict[int, int]:
    """The live slot of each of `row_ids` that has one. Vectorised over the file: a write
    touches a few rows, and a dict of every slot made each write cost O(rows) in Python.

    A few ids take one comparison pass over the ids each, and the flags are read only at the
    matches: `np.isin` with a live mask made three passes and temporaries over every slot,
    0.53 ms over 237,654 slots where one pass costs 0.03 ms (docs/performance.md).
    """
    ids = writer.view("ids")
    if len(row_ids) <= _FEW_IDS:
        hits = [np.flatnonzero(ids == row_id) for row_id in row_ids]
        found = np.sort(np.concatenate(hits)) if hits else np.empty(0, np.int64)
    else:
        found = np.flatnonzero(np.isin(ids, np.asarray(row_ids, dtype=np.int64)))
    flags = writer.view("flags")
    return {int(ids[s]): int(s) for s in found if not flags[s] & FLAG_DELETED}


#: Up to this many changed rows, `_live_slots` compares ids one by one rather than `np.isin`.
_FEW_IDS = 8


def _compare_slot(writer: VectorFileWriter, slot: int, row: IndexRow, table: str) -> list[str]:
    out: list[str] = []
    expect = {
        "keys": row.key,
        "times": row.time,
        "agent": scope_hash(row.agent_id),
        "project": scope_hash(row.project_id),
        "channel": scope_hash(row.channel),
        "source": 0 if row.source_id is None else scope_hash(row.source_id),
    }
    for section, value in expect.items():
        if int(writer.view(section)[slot]) != value:
            out.append(f"{table} {row.id}: {section} differs")
    vector = _vector(row.embedding)
    if vector.shape == (writer.dim,):
        if not np.array_equal(writer.view("vectors")[slot], vector):
            out.append(f"{table} {row.id}: vector differs")
    elif not writer.view("flags")[slot] & 2:
        out.append(f"{table} {row.id}: foreign-width row not flagged")
    return out


def _release(writer: VectorFileWriter) -> None:
    """Drop a writer's mapping without msync: a kill keeps the page cache, and the file is
    derived (a torn write after power loss is caught by `verify` and rebuilt)."""
    for attr in ("_views", "_hdr", "_mm"):
        if hasattr(writer, attr):
            delattr(writer, attr)
