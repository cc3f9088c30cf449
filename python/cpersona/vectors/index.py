"""VectorIndex: one table's vector index file: the vector-slot plug-in of the derived index
(derived/base.py owns the log-following protocol: locks, identity, history check, dirty flag,
trim, rebuild, install, background healing).

What is the vector format's own is here: the header checks (docs/vector-index.md), how a
logged row is applied (its old slot flagged deleted, the row appended: slots.py), when the
file is compacted instead, how a file is built from scratch (newest first, so each append lands
at the end of the scan order), the kernel's mapping (`kernel_handle`) and `verify`. The file
sits beside the database, or in this host's cache directory where the capabilities say
"host_cache" (PostgreSQL). While it is rebuilt in the background, scans read the database.

An empty directory where the index or its lock file belongs is removed before use (issue 11);
one with contents is not ours to delete: `IndexObstructed` says so, and scans read SQLite.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from cpersona.derived import healing
from cpersona.derived.base import DerivedIndex, Fields, Progress
from cpersona.derived.healing import RebuildProgress
from cpersona.errors import StoreCorrupt
from cpersona.storage import Store
from cpersona.storage import embeddings as vector_sql
from cpersona.storage.change_log import Changes
from cpersona.storage.embeddings import IndexRow
from cpersona.vectors import checksums
from cpersona.vectors.format import (
    FLAG_DELETED,
    HEADER_DTYPE,
    HEADER_LEN,
    MAGIC,
    VERSION,
    Layout,
    VectorFileWriter,
)
from cpersona.vectors.slots import (
    HEADROOM,
    TABLE_CODES,
    KeptWriter,
    Shape,
    append_row,
    compare_slot,
    file_key,
    live_slots,
    release,
)
from cpersona.yielding import CallActivity

__all__ = ["TABLE_CODES", "IndexStatus", "VectorIndex", "index_file"]

log = logging.getLogger("cpersona.vectors")

#: Rebuild instead of growing when at least this share of slots is deleted.
COMPACT_RATIO = 0.5
#: Applied log entries of a table kept before they are deleted.
TRIM_EVERY = 5000


def index_file(db_path: str | Path, table: str) -> Path:
    """The index file of `table` beside the database file at `db_path`."""
    return Path(f"{db_path}.{table}.vec")


@dataclass(frozen=True, slots=True)
class Written:
    """A file `_build` wrote: the rows it holds, and the log position it has applied."""

    rows: int
    applied_seq: int


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


class VectorIndex(DerivedIndex[np.void, KeptWriter, Written]):
    """The index of one table (`memories` or `episodes`) of one database."""

    kind = "vector"
    suffix = ".vec"
    table_codes = TABLE_CODES
    log_name = "vector_log"
    temp_prefix = "cpersona-vec-"

    def __init__(
        self,
        db: Store,
        table: str,
        directory: str | None = None,
        activity: CallActivity | None = None,
        *,
        base: Path | None = None,
        keep_log: int = 0,
    ) -> None:
        """`directory`: where the file goes instead of beside the database file; `base`: the
        path the files are named after (`<base>.<table>.vec`; default: beside the database,
        or this host's cache directory where the capabilities say so); `keep_log`: applied
        log entries left for other hosts' files; `activity`: the tool calls a background
        rebuild gives way to (yielding.py)."""
        if directory and not db.is_memory and base is None:
            base = Path(directory) / Path(db.path).name
        #: The kernel's mapping of the file, its checksums, and the identity they were opened
        #: for (kernel_handle).
        self._handle: tuple[tuple[object, ...], tuple[Any, np.ndarray]] | None = None
        #: The sync's writer, kept mapped between syncs while the file is the same
        #: (`_open_for_update`); only touched under the thread lock and the exclusive lock.
        self._kept: KeptWriter | None = None
        super().__init__(
            db,
            table,
            vector_sql,
            None if db.is_memory else base,
            log,
            keep_log=keep_log,
            activity=activity,
        )

    @property
    def trim_every(self) -> int:
        return TRIM_EVERY  # read at each trim: the tests shrink it

    # -- reading -----------------------------------------------------------------------------

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
        key: tuple[object, ...] = (
            open_file,
            st.st_dev,
            st.st_ino,
            st.st_size,
            head[:16],
            head[24:32],
            head[40:60],
        )
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
        problem = checksums.content_problem(self.path, dim, capacity, handle.count, sums)
        if problem:
            raise StoreCorrupt(f"corrupt vector file: {problem}")
        self._handle = (key, (handle, sums))
        return handle, sums

    # -- the header --------------------------------------------------------------------------

    def _parse(self, fd: int, size: int) -> tuple[np.void | None, str]:
        """Every check of docs/vector-index.md that needs no mapping."""
        raw = os.pread(fd, HEADER_LEN, 0)
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
        return header, ""

    def _fields(self, header: np.void) -> Fields:
        return Fields(
            bool(int(header["dirty"])),
            bytes(header["db_uid"]),
            int(header["table"]),
            int(header["applied_seq"]),
        )

    def _file_problem(self, header: np.void) -> str:
        return checksums.problem(
            self.path, int(header["table"]), int(header["capacity"]), self.db_uid()
        )

    def _trusted(self) -> tuple[np.void | None, str]:
        header, problem = super()._trusted()
        if not problem:
            writer, problem = self._open_writer()
            if writer is not None:
                release(writer)
        return header, problem

    def _open_trusted(self) -> tuple[VectorFileWriter | None, str]:
        _, problem = super()._trusted()
        return (None, problem) if problem else self._open_writer()

    def _open_writer(self) -> tuple[VectorFileWriter | None, str]:
        try:
            writer = VectorFileWriter(self.path)
        except (OSError, ValueError, TypeError) as exc:  # changed since _inspect (not by us)
            return None, f"unreadable ({exc})"
        count = writer.count
        if count and int(writer.view("order").max()) >= count:
            release(writer)
            return None, "its scan order names a slot beyond count"
        return writer, ""

    # -- applying the log --------------------------------------------------------------------

    def _open_for_update(self) -> tuple[KeptWriter | None, int, str]:
        # The file's checks run at every sync; the mapping (and its one pass over the scan
        # order in `_open_writer`) only when the file is not the one kept (slots.KeptWriter).
        header, problem = super()._trusted()
        if header is None or problem:
            self._drop_kept()
            return None, 0, problem
        key = file_key(self.path, int(header["dim"]), int(header["capacity"]))
        kept = self._kept
        if kept is None or kept.key != key:
            self._drop_kept()
            writer, problem = self._open_writer()
            if writer is None:
                return None, 0, problem
            kept = self._kept = KeptWriter(writer, checksums.SumWriter(writer), key)
        return kept, kept.writer.header().applied_seq, ""

    def _close_update(self, handle: KeptWriter) -> None:
        if self._kept is not handle:  # dropped by a failed apply
            return
        try:  # after the apply's own writes (and a growth's new files): the files as they are
            header = handle.writer.header()
            handle.key = file_key(self.path, header.dim, header.capacity)
        except OSError:
            self._drop_kept()

    def _drop_kept(self) -> None:
        # Under the thread lock: a reader's thread may start a background rebuild (or close
        # the index) while another thread's sync applies through the kept writer.
        with self._thread_lock:
            kept, self._kept = self._kept, None
            if kept is not None:
                kept.release()

    def _apply(self, handle: KeptWriter, changes: Changes) -> str:
        try:
            applied = self._apply_changes(handle.writer, changes, handle)
        except BaseException:  # the file is left dirty (rebuilt next time): map it afresh
            self._drop_kept()
            raise
        if applied:
            return ""
        return "half its slots are deleted, or a first width"

    def _apply_changes(
        self, writer: VectorFileWriter, changes: Changes, kept: KeptWriter | None = None
    ) -> bool:
        """Apply `changes` to `writer`'s file (through `kept`, `writer`'s kept mapping, when
        given); False (nothing applied) when the table must be rebuilt instead (a
        compaction, or a first row of another width)."""
        if changes.row_ids:
            rows = vector_sql.rows_by_id(self.db, self.table, changes.row_ids)
            if self._needs_rebuild(writer, rows, changes.row_ids):
                return False
            writer.set_header(dirty=1)
            if kept is None:
                slots, sums = live_slots(writer, changes.row_ids), checksums.SumWriter(writer)
            else:
                slots, sums = kept.live_slots(changes.row_ids), kept.sums
            try:
                for row_id in changes.row_ids:
                    self._apply_row(writer, sums, slots, row_id, rows.get(row_id))
            finally:
                if kept is None:
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

    # -- building ----------------------------------------------------------------------------

    def _more_rows_than(self, limit: int) -> bool:
        return vector_sql.embedded_more_than(self.db, self.table, limit)

    def _build(self, tmp: Path, progress: Progress | None, *, online: bool) -> Written:
        log_seq = vector_sql.max_seq(self.db)
        total, dim = vector_sql.embedded_shape(self.db, self.table)
        if online and progress is not None:
            progress(0, total)
        # A background rebuild steps often (it gives way to calls between steps) and leaves
        # the msync to the kernel: nothing reads its private file before the catch-up.
        every = healing.STEP_ROWS if online else 10_000
        rows = self._write_file(tmp, Shape(log_seq, total, dim), progress, every, flush=not online)
        return Written(rows, log_seq)

    def _write_file(
        self, tmp: Path, shape: Shape, progress: Progress | None, every: int, *, flush: bool
    ) -> int:
        """Write every embedded row into a new file at `tmp` with its sidecar, as applied up to
        `shape.log_seq`; `progress(done, total)` every `every` rows and at the end. Returns
        the rows written. Newest first, so each append lands at the end of the scan order (no
        shifting). `flush`: msync before the sidecar is written."""
        writer = VectorFileWriter.create(
            tmp,
            shape.dim or 1,
            shape.total + HEADROOM,
            self.db_uid(),
            TABLE_CODES[self.table],
        )
        done = 0
        try:
            for row in vector_sql.iter_rows(self.db, self.table):
                append_row(writer, row, HEADROOM)
                done += 1
                if progress is not None and done % every == 0:
                    progress(done, shape.total)
            writer.set_header(applied_seq=shape.log_seq, dirty=0)
            if flush:
                writer.flush()
            checksums.write(writer)
        finally:
            release(writer)
        if progress is not None:
            progress(done, shape.total)
        return done

    def _built_seq(self, built: Written) -> int:
        return built.applied_seq

    def _catch_up(self, tmp: Path, built: Written, changes: Changes) -> Written | None:
        writer = VectorFileWriter(tmp)
        try:
            return built if self._apply_changes(writer, changes) else None
        finally:
            release(writer)

    def _built_rows(self, built: Written) -> int:
        return built.rows

    def _installed(self, built: Written) -> None:
        self._handle = None
        self._drop_kept()

    def _stale_extra(self) -> list[Path]:
        # A grow's `.grow` file and a sidecar's `.sum.new` exist only under the exclusive lock.
        return [
            self.path.with_name(self.path.name + ".grow"),
            checksums.sums_path(self.path).with_name(f"{self.path.name}.sum.new"),
        ]

    def _deferring(self) -> None:
        self._handle = None
        self._drop_kept()

    def _release(self) -> None:
        self._handle = None
        self._drop_kept()

    # -- inspection --------------------------------------------------------------------------

    def status(self) -> IndexStatus:
        header, reason, log_seq, rebuild = self._status_parts()
        if header is None:
            exists = self.path.exists()
            return IndexStatus(
                self.table, str(self.path), exists, False, reason, 0, 0, 0, 0, log_seq, rebuild
            )
        return IndexStatus(
            self.table,
            str(self.path),
            True,
            True,
            reason,
            int(header["dim"]),
            int(header["count"]),
            int(header["live"]),
            int(header["applied_seq"]),
            log_seq,
            rebuild,
        )

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
            checksums.slot_sums(writer.sections, slice(0, writer.count)) != sums[: writer.count]
        )
        problems.extend(f"{self.table} {int(idv[s])}: content checksum differs" for s in wrong[:20])
        if wrong.shape[0] > 20:
            problems.append(f"{self.table}: {wrong.shape[0] - 20} more checksums differ")
        return problems
