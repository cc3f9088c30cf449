"""The vector index file: layout constants, scope hashing and the writer.

The format is described in ``docs/vector-index.md`` and declared here, once for Python: the
writer below, the numpy reader (``cpersona._fallback.vectors``), the checksums and the health
checks all work from these constants. The Rust reader declares the same as tables
(``rust/store.rs``: ``HEADER``, ``SECTIONS``); ``_core.layout()`` exports them and
``tests/kernels/test_kernels_layout.py`` holds them equal to this declaration, so a change made
on one side only fails a test. All integers are little-endian.

Header, 128 bytes::

    0   8  magic b"CPVECIX1"        40  16  db_uid (16 raw bytes)
    8   4  version u32 = 2          56   4  table u32 (0 memories, 1 episodes)
    12  4  dim u32 (>= 1)           60   4  dirty u32 (non-zero while a writer mutates)
    16  8  count u64 (slots used)   64   8  live u64 (slots not deleted)
    24  8  capacity u64 (>= count)  72  56  zero
    32  8  applied_seq i64

Then, each at a 64-byte-aligned offset and sized by ``capacity``: ``ids`` i64, ``keys`` i64
(``created_at`` in Unix seconds), ``times`` i64 (the row's instant in microseconds,
``cpersona.timerange.row_time``), ``agent``/``project``/``channel``/``source`` u64 scope hashes,
``flags`` u8 (bit 0 deleted, bit 1 foreign width), ``order`` u32 (``order[:count]`` lists slots
by ``(key DESC, id DESC)``, newest first) and ``vectors`` f32 x dim, row-major. The file is
exactly ``vectors_offset + capacity * dim * 4`` bytes.

Only this module writes the file. It maintains ``count``, ``live`` and ``order``; the crash-safety
fields ``dirty`` and ``applied_seq`` belong to the caller (the SQLite sync), which also holds the
file lock. Every write goes through one shared ``np.memmap`` (mode ``r+``), so readers mapping
the same file see it in place; growth writes a new file and renames it over the old one, so an
existing reader keeps a consistent (older) mapping.
"""

from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from cpersona import private_files
from cpersona.derived.scope import SCOPE_FIELDS
from cpersona.forwarding import Forwarded
from cpersona.timerange import NO_TIME

MAGIC = b"CPVECIX1"
#: 2 added the ``times`` section; a file of another version is rebuilt.
VERSION = 2
HEADER_LEN = 128
SECTION_ALIGN = 64
FLAG_DELETED = 1
FLAG_FOREIGN = 2
TABLE_MEMORIES = 0
TABLE_EPISODES = 1

# (name, element dtype) in file order; "vectors" holds dim elements per slot, the rest one.
SECTIONS: tuple[tuple[str, str], ...] = (
    ("ids", "<i8"),
    ("keys", "<i8"),
    ("times", "<i8"),
    *SCOPE_FIELDS,  # derived/scope.py: the full-text file's puts store the same
    ("flags", "u1"),
    ("order", "<u4"),
    ("vectors", "<f4"),
)
#: The section that holds `dim` elements per slot.
DIM_SECTION = "vectors"

HEADER_DTYPE = np.dtype(
    [
        ("magic", "S8"),
        ("version", "<u4"),
        ("dim", "<u4"),
        ("count", "<u8"),
        ("capacity", "<u8"),
        ("applied_seq", "<i8"),
        ("db_uid", "V16"),
        ("table", "<u4"),
        ("dirty", "<u4"),
        ("live", "<u8"),
        ("reserved", "V56"),
    ]
)
assert HEADER_DTYPE.itemsize == HEADER_LEN


@dataclass(frozen=True, slots=True)
class Layout:
    """Byte offsets of every section for one ``(dim, capacity)``; ``file_len`` is the size."""

    dim: int
    capacity: int
    offsets: dict[str, int]
    file_len: int

    @classmethod
    def of(cls, dim: int, capacity: int) -> Layout:
        offsets: dict[str, int] = {}
        end = HEADER_LEN
        for name, dtype in SECTIONS:
            start = -(-end // SECTION_ALIGN) * SECTION_ALIGN
            per_slot = np.dtype(dtype).itemsize * (dim if name == DIM_SECTION else 1)
            offsets[name] = start
            end = start + capacity * per_slot
        return cls(dim=dim, capacity=capacity, offsets=offsets, file_len=end)


@dataclass(frozen=True, slots=True)
class Header:
    """A snapshot of the header fields."""

    version: int
    dim: int
    count: int
    capacity: int
    applied_seq: int
    db_uid: bytes
    table: int
    dirty: int
    live: int


def section_views(mm: np.memmap[Any, Any], layout: Layout) -> dict[str, np.ndarray[Any, Any]]:
    """Every section of the mapping `mm` as a capacity-long array (`dim` wide for vectors)."""
    views: dict[str, np.ndarray[Any, Any]] = {}
    for name, dtype in SECTIONS:
        shape: tuple[int, ...] = (layout.capacity,)
        if name == DIM_SECTION:
            shape = (layout.capacity, layout.dim)
        views[name] = np.ndarray(shape, dtype=dtype, buffer=mm, offset=layout.offsets[name])
    return views


def _allocate(fd: int, length: int) -> None:
    """Give the file `length` bytes with every block reserved now.

    A file sized with truncate() is sparse: its pages are allocated when first written through
    the mapping, and on a full disk that write kills the whole process with SIGBUS instead of
    raising. posix_fallocate fails with ENOSPC up front (glibc emulates it on filesystems
    without native support); where Python lacks it (macOS) the file stays sparse.
    """
    fallocate = getattr(os, "posix_fallocate", None)
    if fallocate is None:
        os.ftruncate(fd, length)
    elif length:
        fallocate(fd, 0, length)


class VectorFileWriter:
    """Writes one vector index file in place through a shared ``np.memmap``.

    Open an existing file with ``VectorFileWriter(path)`` or make a new one with
    ``VectorFileWriter.create(...)``. The writer validates nothing beyond the header it needs;
    the readers (``VectorIndex.open``) do the full validation.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._map()

    def _map(self) -> None:
        # Files of earlier versions were sized sparse: reserve their blocks before writing
        # through the mapping (a no-op for a file created by `create`; ENOSPC on a full disk).
        fd = os.open(self.path, os.O_RDWR)
        try:
            _allocate(fd, os.fstat(fd).st_size)
        finally:
            os.close(fd)
        self._mm: np.memmap[Any, Any] = np.memmap(self.path, dtype=np.uint8, mode="r+")
        self._hdr = np.ndarray((), dtype=HEADER_DTYPE, buffer=self._mm, offset=0)
        if bytes(self._hdr["magic"]) != MAGIC:
            raise ValueError(f"{self.path} is not a cpersona vector file")
        self.layout = Layout.of(int(self._hdr["dim"]), int(self._hdr["capacity"]))
        self._views = section_views(self._mm, self.layout)

    @classmethod
    def create(
        cls,
        path: str | os.PathLike[str],
        dim: int,
        capacity: int,
        db_uid: bytes,
        table: int,
    ) -> VectorFileWriter:
        """Creates (or overwrites) an empty file at ``path`` and opens it.

        Args:
            dim: floats per vector, >= 1.
            capacity: slots to allocate, >= 0; ``grow`` adds more.
            db_uid: the database's 16-byte identity.
            table: ``TABLE_MEMORIES`` or ``TABLE_EPISODES``.

        On failure (a full disk) nothing is left at ``path``.

        Writing straight to ``path`` is the caller's choice: a rebuild should create a
        temporary path and ``os.replace`` it when complete. An existing file at ``path`` is
        unlinked, never truncated: a reader that still maps it would die of SIGBUS on the
        truncated pages, while an unlinked file stays readable until its last mapping closes.
        """
        if dim < 1 or capacity < 0:
            raise ValueError(f"need dim >= 1 and capacity >= 0, got dim={dim}, capacity={capacity}")
        if len(db_uid) != 16:
            raise ValueError(f"db_uid must be 16 bytes, got {len(db_uid)}")
        layout = Layout.of(dim, capacity)
        header = np.zeros((), dtype=HEADER_DTYPE)
        header["magic"] = MAGIC
        header["version"] = VERSION
        header["dim"] = dim
        header["capacity"] = capacity
        header["db_uid"] = np.void(bytes(db_uid))
        header["table"] = table
        with os.fdopen(private_files.recreate(path), "wb") as f:
            try:
                _allocate(f.fileno(), layout.file_len)
                f.write(header.tobytes())
            except BaseException:
                os.unlink(path)
                raise
        return cls(path)

    # -- header ----------------------------------------------------------------------------

    def header(self) -> Header:
        """Reads the header now."""
        h = self._hdr
        return Header(
            version=int(h["version"]),
            dim=int(h["dim"]),
            count=int(h["count"]),
            capacity=int(h["capacity"]),
            applied_seq=int(h["applied_seq"]),
            db_uid=bytes(h["db_uid"]),
            table=int(h["table"]),
            dirty=int(h["dirty"]),
            live=int(h["live"]),
        )

    def set_header(self, *, applied_seq: int | None = None, dirty: int | None = None) -> None:
        """Sets the caller-owned crash-safety fields."""
        if applied_seq is not None:
            self._hdr["applied_seq"] = applied_seq
        if dirty is not None:
            self._hdr["dirty"] = dirty

    dim: Forwarded[int] = Forwarded("layout")
    capacity: Forwarded[int] = Forwarded("layout")

    @property
    def count(self) -> int:
        return int(self._hdr["count"])

    def view(self, section: str) -> np.ndarray[Any, Any]:
        """The first ``count`` entries of a section (a writable view of the mapping)."""
        return self._views[section][: self.count]

    @property
    def sections(self) -> dict[str, np.ndarray[Any, Any]]:
        """Every section, capacity-long (what `checksums.slot_sums` reads)."""
        return self._views

    # -- slots -----------------------------------------------------------------------------

    def append(
        self,
        row_id: int,
        key: int,
        *,
        time: int = NO_TIME,
        agent: int,
        project: int,
        channel: int,
        source: int,
        vector: npt.NDArray[np.float32],
    ) -> int:
        """Writes a new slot and inserts it into ``order``; returns the slot.

        Args:
            row_id: the SQLite row id.
            key: ``created_at`` as Unix seconds.
            time: the row's instant key (``cpersona.timerange.row_time``); ``NO_TIME`` (in
                no time range) when not given.
            agent, project, channel, source: scope hashes (``scope_hash``; source 0 = absent).
            vector: the row's embedding as float32. If its length is not ``dim`` the slot is
                foreign-width: it keeps a zero vector and takes a scan position unscored.

        Raises:
            ValueError: the file is full (call ``grow`` first).
        """
        count = self.count
        if count >= self.capacity:
            raise ValueError(f"file is full ({self.capacity} slots); grow it first")
        v = self._views
        v["ids"][count] = row_id
        v["keys"][count] = key
        v["times"][count] = time
        v["agent"][count] = agent
        v["project"][count] = project
        v["channel"][count] = channel
        v["source"][count] = source
        vector = np.asarray(vector)
        if vector.dtype == np.float32 and vector.shape == (self.dim,):
            v["vectors"][count] = vector
            v["flags"][count] = 0
        else:
            v["vectors"][count] = 0.0
            v["flags"][count] = FLAG_FOREIGN
        pos = self._order_position(key, row_id, count)
        order = v["order"]
        # A new row is the newest, so `pos` is mostly 0 and the whole order moves one place:
        # one memmove in the mapping (count < capacity, so `count + 1` entries fit), not numpy's
        # copy to a temporary and back (0.18 against 0.05 ms at 1,000,000 slots).
        item = order.itemsize
        ctypes.memmove(order.ctypes.data + (pos + 1) * item, order.ctypes.data + pos * item,
                       (count - pos) * item)  # fmt: skip
        order[pos] = count
        # Slot data and order first, counters last: a reader never sees a count that names an
        # unwritten slot.
        self._hdr["live"] = int(self._hdr["live"]) + 1
        self._hdr["count"] = count + 1
        return count

    def _order_position(self, key: int, row_id: int, count: int) -> int:
        """Where ``(key, row_id)`` goes in ``order[:count]`` (sorted by (key, id) descending)."""
        order, keys, ids = self._views["order"], self._views["keys"], self._views["ids"]
        lo, hi = 0, count
        while lo < hi:
            mid = (lo + hi) // 2
            slot = int(order[mid])
            if (int(keys[slot]), int(ids[slot])) > (key, row_id):
                lo = mid + 1
            else:
                hi = mid
        return lo

    def extend(
        self,
        row_ids: npt.NDArray[np.int64],
        keys: npt.NDArray[np.int64],
        *,
        times: npt.NDArray[np.int64] | None = None,
        agent: npt.NDArray[np.uint64],
        project: npt.NDArray[np.uint64],
        channel: npt.NDArray[np.uint64],
        source: npt.NDArray[np.uint64],
        vectors: npt.NDArray[np.float32],
    ) -> None:
        """Appends many full-width slots at once, then re-sorts ``order`` (for bulk loads).

        Args:
            row_ids, keys, times, agent, project, channel, source: (m,) arrays, as in
                ``append``.
            vectors: (m, dim) float32.

        Raises:
            ValueError: shapes disagree, or the rows do not fit (call ``grow`` first).
        """
        m = int(np.shape(row_ids)[0])
        count = self.count
        if np.shape(vectors) != (m, self.dim):
            raise ValueError(f"vectors must be ({m}, {self.dim}), got {np.shape(vectors)}")
        if count + m > self.capacity:
            raise ValueError(f"{m} rows do not fit: {count} of {self.capacity} slots used")
        if times is None:
            times = np.full(m, NO_TIME, dtype=np.int64)
        columns: dict[str, npt.NDArray[Any]] = {"ids": row_ids, "keys": keys, "times": times}
        columns["agent"] = agent
        columns |= {"project": project, "channel": channel, "source": source, "vectors": vectors}
        for name, values in columns.items():
            self._views[name][count : count + m] = values
        self._views["flags"][count : count + m] = 0
        self._hdr["live"] = int(self._hdr["live"]) + m
        self._hdr["count"] = count + m
        self.rebuild_order()

    def set_deleted(self, slot: int) -> None:
        """Marks a slot deleted; it keeps its place in ``order`` but takes no scan position."""
        if not 0 <= slot < self.count:
            raise IndexError(f"slot {slot} is not in use (count {self.count})")
        flags = self._views["flags"]
        if not flags[slot] & FLAG_DELETED:
            flags[slot] |= FLAG_DELETED
            self._hdr["live"] = int(self._hdr["live"]) - 1

    def rebuild_order(self) -> None:
        """Recomputes ``order[:count]`` from keys and ids (after bulk edits)."""
        count = self.count
        keys, ids = self._views["keys"][:count], self._views["ids"][:count]
        newest_first = np.lexsort((ids, keys))[::-1]
        self._views["order"][:count] = newest_first.astype(np.uint32)

    # -- file ------------------------------------------------------------------------------

    def grow(self, new_capacity: int) -> None:
        """Reallocates to ``new_capacity`` slots: a new file, renamed over the old one.

        The layout depends on the capacity, so the sections move; readers that mapped the old
        file keep reading it until they reopen.
        """
        if new_capacity < self.count:
            raise ValueError(f"new capacity {new_capacity} is below count {self.count}")
        tmp = self.path.with_name(self.path.name + ".grow")
        header = self.header()
        new = VectorFileWriter.create(tmp, header.dim, new_capacity, header.db_uid, header.table)
        count = header.count
        for name, _ in SECTIONS:
            new._views[name][:count] = self._views[name][:count]
        new._hdr["applied_seq"] = header.applied_seq
        new._hdr["dirty"] = header.dirty
        new._hdr["live"] = header.live
        new._hdr["count"] = count
        new.flush()
        new.close()
        self.close()
        os.replace(tmp, self.path)
        self._map()

    def flush(self) -> None:
        """Writes dirty pages to the file (``msync``)."""
        self._mm.flush()

    def close(self) -> None:
        """Flushes and drops this writer's references to the mapping; it is unusable afterwards.

        The mapping itself is released when the last view of it is gone (numpy views handed out
        by ``view`` keep it alive).
        """
        self._mm.flush()
        self._views = {}
        del self._hdr
        del self._mm

    def __enter__(self) -> VectorFileWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        if hasattr(self, "_mm"):
            self.close()
