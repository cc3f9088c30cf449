"""The numpy twin of rust/py/vectors.rs: the vector index file, mapped and validated, and its
scoped window / far scan (docs/vector-index.md, "The scan").

The file's layout is `cpersona.vectors.format`'s (the writer's declaration, which
`tests/kernels/test_kernels_layout.py` holds equal to the Rust reader's tables): this module
reads the header through its `HEADER_DTYPE` and the sections through its `Layout`.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from cpersona._fallback.args import (
    F32,
    U64,
    Array,
    as_float,
    as_int,
    as_u64,
    check_threshold,
    concat,
    non_negative,
    shaped,
    time_range,
    typed,
)
from cpersona._fallback.kernels import best, dot_rows
from cpersona.errors import StoreCorrupt
from cpersona.vectors.format import (
    FLAG_DELETED,
    FLAG_FOREIGN,
    HEADER_DTYPE,
    HEADER_LEN,
    MAGIC,
    VERSION,
    Layout,
    section_views,
)

# Order entries examined per vectorised step of the scope walk.
_WALK_BLOCK = 65_536


class VectorIndex:
    """A validated, read-only mapping of one vector index file (``np.memmap``, no copy).

    ``dim``, ``capacity``, ``table`` and ``db_uid`` are fixed for a file; ``count``, ``live``,
    ``applied_seq`` and ``dirty`` are read from the mapping on each access, because the sync
    appends in place.
    """

    __slots__ = ("_capacity", "_db_uid", "_dim", "_hdr", "_mm", "_table", "_views")
    _capacity: int
    _db_uid: bytes
    _dim: int
    # The header as a view of the mapping: its fields read what the file holds now.
    _hdr: np.ndarray[Any, Any]
    _mm: np.memmap[Any, Any]
    _table: int
    _views: dict[str, Array]

    def __init__(self) -> None:
        raise TypeError("use VectorIndex.open(path)")

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"VectorIndex is immutable; cannot set {name!r}")

    @staticmethod
    def open(path: str | os.PathLike[str]) -> VectorIndex:
        """Maps and validates the file; raises StoreCorrupt when it cannot be trusted."""
        path = os.fspath(path)
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
        if size < HEADER_LEN:
            raise StoreCorrupt(
                f"corrupt vector file: file is {size} bytes, "
                f"shorter than the {HEADER_LEN}-byte header"
            )
        mm = np.memmap(path, dtype=np.uint8, mode="r")
        hdr = np.ndarray((), dtype=HEADER_DTYPE, buffer=mm, offset=0)
        if bytes(hdr["magic"]) != MAGIC:
            raise StoreCorrupt("corrupt vector file: wrong magic")
        version, dim = int(hdr["version"]), int(hdr["dim"])
        if version != VERSION:
            raise StoreCorrupt(f"corrupt vector file: unsupported version {version}")
        if dim == 0:
            raise StoreCorrupt("corrupt vector file: dim is 0")
        count, capacity = int(hdr["count"]), int(hdr["capacity"])
        if count > capacity:
            raise StoreCorrupt(f"corrupt vector file: count {count} exceeds capacity {capacity}")
        layout = Layout.of(dim, capacity)
        if layout.file_len != mm.shape[0]:
            raise StoreCorrupt(
                f"corrupt vector file: file is {mm.shape[0]} bytes, "
                f"the header implies {layout.file_len}"
            )
        views = section_views(mm, layout)
        order = views["order"][:count]
        bad = np.flatnonzero(order >= count)
        if bad.size:
            i = int(bad[0])
            raise StoreCorrupt(
                f"corrupt vector file: order[{i}] = {int(order[i])} is not below count {count}"
            )
        index = object.__new__(VectorIndex)
        for name, value in (
            ("_mm", mm),
            ("_hdr", hdr),
            ("_views", views),
            ("_dim", dim),
            ("_capacity", capacity),
            ("_table", int(hdr["table"])),
            ("_db_uid", bytes(hdr["db_uid"])),
        ):
            object.__setattr__(index, name, value)
        return index

    @property
    def dim(self) -> int:
        return self._dim

    @property
    def capacity(self) -> int:
        return self._capacity

    @property
    def count(self) -> int:
        """Slots in use, read from the live header."""
        count = int(self._hdr["count"])
        if count > self._capacity:
            raise StoreCorrupt(
                f"corrupt vector file: count {count} exceeds capacity {self._capacity}"
            )
        return count

    @property
    def live(self) -> int:
        return int(self._hdr["live"])

    @property
    def applied_seq(self) -> int:
        return int(self._hdr["applied_seq"])

    @property
    def dirty(self) -> int:
        return int(self._hdr["dirty"])

    @property
    def table(self) -> int:
        return self._table

    @property
    def db_uid(self) -> bytes:
        return self._db_uid

    def __repr__(self) -> str:
        return (
            f"VectorIndex(dim={self._dim}, count={int(self._hdr['count'])}, "
            f"capacity={self._capacity}, table={self._table})"
        )

    def scan(
        self,
        query: np.ndarray,
        agent: int,
        projects: np.ndarray,
        channels: np.ndarray,
        sources: np.ndarray,
        window: int,
        reach: int,
        threshold: float,
        k: int,
        far_k: int,
        chunk_rows: int = 4096,
        threads: int = 1,
        sums: np.ndarray | None = None,
        *,
        since: int | None = None,
        until: int | None = None,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The scoped window / far scan of docs/vector-index.md, "The scan".

        Args:
            query: (dim,) float32.
            agent: scope hash, matched exactly.
            projects, channels, sources: (m,) uint64 scope hashes; empty admits any.
            window: N, positions [0, N) are the window.
            reach: R, positions [N, R) are the far region; R <= N means none.
            threshold: keep ``score >= threshold`` (compared in float64).
            k, far_k: list lengths.
            chunk_rows: rows gathered and scored at a time (memory bound only).
            threads: accepted for parity with the Rust core; numpy scores on one thread.
            sums: (>= count,) uint32 content checksums (vectors/checksums.py); each slot
                scored is checked against its own first, StoreCorrupt when one differs.
            since, until: a time range ``[since, until)`` of row instants (microseconds);
                either given, rows without an instant (``i64::MIN``) are out of scope.

        Returns:
            (near_ids int64, near_scores float32, far_ids int64, far_scores float32), each
            best first by (score desc, position asc).
        """
        query = typed(query, F32, "query")
        agent = as_u64(agent, "agent")
        named_sets = (("projects", projects), ("channels", channels), ("sources", sources))
        sets = [typed(s, U64, name) for name, s in named_sets]
        counts = [as_int(v, n) for n, v in (("window", window), ("reach", reach))]
        threshold = as_float(threshold, "threshold")
        counts += [
            as_int(v, n)
            for n, v in (
                ("k", k),
                ("far_k", far_k),
                ("chunk_rows", chunk_rows),
                ("threads", threads),
            )
        ]
        names = ("window", "reach", "k", "far_k", "chunk_rows", "threads")
        window, reach, k, far_k, chunk_rows, _ = (
            non_negative(v, n) for v, n in zip(counts, names, strict=True)
        )
        times = time_range(since, until)
        query = shaped(query, "query", 1)
        sets = [shaped(s, name, 1) for s, (name, _) in zip(sets, named_sets, strict=True)]
        if query.shape[0] != self._dim:
            raise ValueError(f"dimension mismatch: expected {self._dim}, got {query.shape[0]}")
        check_threshold(threshold)
        if chunk_rows == 0:
            raise ValueError("chunk_rows must be at least 1")
        has_far = reach > window
        slots = self._in_scope(agent, sets, reach if has_far else window, times)
        if sums is not None:
            sums = shaped(typed(sums, np.dtype(np.uint32), "sums"), "sums", 1)
            if sums.shape[0] < self.count:
                raise StoreCorrupt(
                    f"corrupt vector file: {sums.shape[0]} content checksums for {self.count} slots"
                )
        near_end = min(window, slots.shape[0])
        near = self._score(slots, 0, near_end, query, threshold, k, chunk_rows, sums)
        far_end = slots.shape[0] if has_far else near_end
        far = self._score(slots, near_end, far_end, query, threshold, far_k, chunk_rows, sums)
        ids = self._views["ids"]
        return (
            ids[slots[near[0]]].astype(np.int64),
            near[1],
            ids[slots[far[0]]].astype(np.int64),
            far[1],
        )

    def _in_scope(
        self, agent: int, sets: list[Array], span: int, times: tuple[int, int] | None
    ) -> Array:
        """The first ``span`` in-scope slots in scan order (int64); index = scan position."""
        count = self.count
        v = self._views
        found: list[Array] = []
        need = span
        start = 0
        while need > 0 and start < count:
            block = v["order"][start : min(start + _WALK_BLOCK, count)].astype(np.int64)
            start += block.shape[0]
            bad = np.flatnonzero(block >= count)
            walked = block[: int(bad[0])] if bad.size else block
            mask = (v["flags"][walked] & FLAG_DELETED) == 0
            mask &= v["agent"][walked] == np.uint64(agent)
            for name, allowed in zip(("project", "channel", "source"), sets, strict=True):
                if allowed.shape[0]:
                    mask &= np.isin(v[name][walked], allowed)
            if times is not None:
                at = v["times"][walked]
                mask &= (at >= times[0]) & (at < times[1])
            chosen = walked[mask]
            found.append(chosen[:need])
            need -= min(need, chosen.shape[0])
            if bad.size and need > 0:
                i = start - block.shape[0] + int(bad[0])
                raise StoreCorrupt(
                    f"corrupt vector file: order[{i}] = {int(block[bad[0]])} "
                    f"is not below count {count}"
                )
        return concat(found, np.int64)

    def _score(
        self,
        slots: Array,
        begin: int,
        end: int,
        query: Array,
        threshold: float,
        k: int,
        chunk_rows: int,
        sums: Array | None,
    ) -> tuple[Array, Array]:
        """Best k of positions [begin, end): (positions int64, scores float32); with `sums`,
        every slot scored is checked against its content checksum first."""
        vectors, flags = self._views["vectors"], self._views["flags"]
        best_pos, best_scores = np.empty(0, np.int64), np.empty(0, np.float32)
        if k == 0:
            return best_pos, best_scores
        for lo in range(begin, end, chunk_rows):
            hi = min(lo + chunk_rows, end)
            chunk = slots[lo:hi]
            first, last = int(chunk[0]), int(chunk[-1])
            run = first - last == hi - lo - 1 and bool(np.all(np.diff(chunk) == -1))
            if run:
                # A run of consecutive slots, newest first (a file appended in time order):
                # score the mapped rows in place, forwards through memory, without a gather.
                scores = dot_rows(vectors[last : first + 1], query)[::-1]
            else:
                scores = dot_rows(vectors[chunk], query)
            # Foreign-width slots hold zero vectors: scored harmlessly, then dropped.
            keep = (flags[chunk] & FLAG_FOREIGN) == 0
            if sums is not None:
                _check_sums(self._views, chunk, keep, slice(last, first + 1) if run else None, sums)
            keep &= scores.astype(np.float64) >= threshold
            positions = np.flatnonzero(keep).astype(np.int64) + lo
            # Per-chunk winners merged with the running best: memory stays O(chunk + k).
            best_pos, best_scores = best(
                np.concatenate([best_pos, positions]),
                np.concatenate([best_scores, scores[keep]]),
                k,
            )
        return best_pos, best_scores


def _check_sums(
    views: dict[str, Array], chunk: Array, keep: Array, run: slice | None, sums: Array
) -> None:
    """StoreCorrupt naming the first slot of `chunk` to be scored (`keep`) whose content
    checksum differs; `run`: the same slots as one slice, oldest first, read in place."""
    from cpersona.vectors.checksums import slot_sums  # numpy only; no import cycle at load

    if run is not None:
        differs = (slot_sums(views, run) != sums[run])[::-1]
    else:
        differs = slot_sums(views, chunk) != sums[chunk]
    bad = np.flatnonzero(differs & keep)
    if bad.size:
        slot = int(chunk[int(bad[0])])
        raise StoreCorrupt(
            f"corrupt vector file: the content checksum of slot {slot} "
            f"(row {int(views['ids'][slot])}) differs: its bytes changed after they were written"
        )
