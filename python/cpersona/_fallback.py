"""The numpy twin of `cpersona._core`: same names, signatures, defaults, dtypes and exceptions.

Everything here must answer exactly as the Rust core does, tie-breaks included:

- Top k is taken under one total order: score descending as ``f32::total_cmp`` orders it
  (``+0.0`` above ``-0.0``, a positive NaN above ``+inf``), then position ascending.
- A row's score is the same whatever block it is scored in. ``rows @ query`` does not promise
  that (BLAS sums a row differently depending on the rows around it), so rows are scored with
  ``einsum``, which sums each row on its own. Scores agree with Rust to float32 rounding, and
  bit for bit when the dot products are exact (small-integer vectors).
- Fusion sums each candidate's terms largest first in float64, as the Rust core does, so fused
  scores are identical bits.
- Arrays must already have the documented dtype (``TypeError``) and be C-contiguous with the
  documented number of dimensions (``ValueError``); nothing is converted silently.

One exception: the full-text index (`_core.FtsIndex`, `_core.fts_fold`) has no twin here. Its
fallback is the FTS5 statement it reproduces (docs/fts-index.md), which the pipeline runs
whenever the core is absent.
"""

from __future__ import annotations

import array
import itertools
import math
import operator
import os
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from cpersona.errors import StoreCorrupt

KERNEL = "numpy"
DEBUG_BUILD = False
__version__ = "numpy"
DEFAULT_CHUNK_ROWS = 4096

_I64_MAX = 2**63 - 1
_U64_LIMIT = 2**64
# Order entries examined per vectorised step of the scope walk.
_WALK_BLOCK = 65_536

_F32 = np.dtype(np.float32)
_F64 = np.dtype(np.float64)
_I64 = np.dtype(np.int64)
_U64 = np.dtype(np.uint64)

Array = npt.NDArray[Any]


# -- argument checks (mirroring pyo3's extraction and rust/py.rs) ----------------------------


# Checks run in two phases, as in the Rust core: first every argument's type (pyo3 extracts all
# arguments before the function body runs: TypeError, OverflowError), then values and shapes
# (the body: ValueError). So a call with several faults raises the same class on both backends.


def _typed(arr: object, dtype: np.dtype[Any], name: str) -> Array:
    if not isinstance(arr, np.ndarray) or arr.dtype != dtype:
        raise TypeError(f"{name} must be a {dtype} numpy array")
    return arr


def _shaped(arr: Array, name: str, ndim: int) -> Array:
    if arr.ndim != ndim:
        raise ValueError(f"{name} must be {ndim}-D, got {arr.ndim} dimensions")
    if not arr.flags.c_contiguous:
        raise ValueError(f"{name} must be C-contiguous")
    if not arr.flags.aligned:  # Rust cannot view a misaligned buffer as a slice
        raise ValueError(f"{name} must be aligned")
    return arr


def _typed_list(values: object, dtype: np.dtype[Any], name: str) -> list[Array]:
    if isinstance(values, str | bytes) or not isinstance(values, Sequence | np.ndarray):
        raise TypeError(f"{name} must be a sequence of {dtype} arrays")
    return [_typed(v, dtype, f"{name}[i]") for v in values]


def _int(value: object, name: str) -> int:
    try:
        number = operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        raise TypeError(f"{name} must be an int") from None
    if not -(2**63) <= number <= _I64_MAX:
        raise OverflowError(f"{name} does not fit in int64")
    return number


def _count(number: int, name: str) -> int:
    if number < 0:
        raise ValueError(f"{name} must be >= 0, got {number}")
    return number


def _u64(value: object, name: str) -> int:
    try:
        number = operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        raise TypeError(f"{name} must be an int") from None
    if not 0 <= number < _U64_LIMIT:
        raise OverflowError(f"{name} does not fit in uint64")
    return number


def _float(value: object, name: str) -> float:
    if isinstance(value, str | bytes | bytearray) or value is None:
        raise TypeError(f"{name} must be a float")
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a float") from None


def _threshold(value: float) -> float:
    if math.isnan(value):
        raise ValueError("threshold must not be NaN")
    return value


def _rows_and_query(rows: Array, query: Array) -> tuple[Array, Array]:
    rows = _shaped(rows, "rows", 2)
    query = _shaped(query, "query", 1)
    if rows.shape[1] == 0:
        raise ValueError("rows must have at least one column")
    if query.shape[0] != rows.shape[1]:
        raise ValueError(f"dimension mismatch: expected {rows.shape[1]}, got {query.shape[0]}")
    return rows, query


# -- kernels ------------------------------------------------------------------------------


def _dot_rows(rows: Array, query: Array) -> Array:
    """(n,) float32 scores; each row summed on its own, and -0.0 made +0.0 as in Rust."""
    scores: Array = np.einsum("ij,j->i", rows, query)
    # Rust's accumulators start at +0.0, so an all-zero sum is +0.0; total order tells them apart.
    scores += np.float32(0.0)
    return scores


def _total_key(scores: Array) -> Array:
    """int64 keys that order float32 values as ``f32::total_cmp`` does."""
    bits = scores.view(np.int32).astype(np.int64)
    return np.where(bits < 0, bits ^ 0x7FFFFFFF, bits)


def _best(positions: Array, scores: Array, k: int) -> tuple[Array, Array]:
    """The best k of (positions, scores) by (score desc total order, position asc)."""
    n = scores.shape[0]
    if k == 0 or n == 0:
        return np.empty(0, np.int64), np.empty(0, np.float32)
    key = _total_key(scores)
    if k < n:
        # Narrow to the candidates at or above the k-th key (ties included), then sort those.
        kth = np.partition(key, n - k)[n - k]
        keep = np.flatnonzero(key >= kth)
        positions, scores, key = positions[keep], scores[keep], key[keep]
    pick = np.lexsort((positions, -key))[:k]
    return positions[pick].astype(np.int64), scores[pick].astype(np.float32)


def scan_dot(rows: np.ndarray, query: np.ndarray) -> np.ndarray:
    """Dot product of every row with the query.

    Args:
        rows: (n, dim) float32, C-contiguous, dim >= 1.
        query: (dim,) float32.

    Returns:
        (n,) float32 scores.
    """
    rows, query = _rows_and_query(_typed(rows, _F32, "rows"), _typed(query, _F32, "query"))
    return _dot_rows(rows, query)


def top_k(scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The best k scores: (positions int64, scores float32), by (score desc, position asc).

    Args:
        scores: (n,) float32.
        k: >= 0; more than n returns all n.
    """
    scores, k = _typed(scores, _F32, "scores"), _int(k, "k")
    k = _count(k, "k")
    scores = _shaped(scores, "scores", 1)
    return _best(np.arange(scores.shape[0], dtype=np.int64), scores, k)


def scan_chunk(
    rows: np.ndarray, query: np.ndarray, threshold: float, k: int, base_position: int
) -> tuple[np.ndarray, np.ndarray]:
    """Scores a block of rows and keeps the best k with ``score >= threshold``.

    Row i has position ``base_position + i``, so blocks of one window merge
    (``merge_top_k``) into the single-pass answer. The threshold is compared in float64
    against the float32 score widened.

    Args:
        rows: (n, dim) float32, C-contiguous.
        query: (dim,) float32.

    Returns:
        (positions int64, scores float32), best first.
    """
    rows, query = _typed(rows, _F32, "rows"), _typed(query, _F32, "query")
    threshold = _float(threshold, "threshold")
    k, base = _int(k, "k"), _int(base_position, "base_position")
    k, base = _count(k, "k"), _count(base, "base_position")
    rows, query = _rows_and_query(rows, query)
    if base + rows.shape[0] > _I64_MAX:
        raise ValueError("base_position + rows exceeds int64")
    _threshold(threshold)
    scores = _dot_rows(rows, query)
    keep = np.flatnonzero(scores.astype(np.float64) >= threshold)
    return _best(keep.astype(np.int64) + base, scores[keep], k)


def merge_top_k(positions: np.ndarray, scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The best k of (positions[i], scores[i]) pairs, e.g. concatenated ``scan_chunk`` results.

    Args:
        positions: (n,) int64, >= 0.
        scores: (n,) float32.

    Returns:
        (positions int64, scores float32), best first.
    """
    positions, scores = _typed(positions, _I64, "positions"), _typed(scores, _F32, "scores")
    k = _count(_int(k, "k"), "k")
    positions, scores = _shaped(positions, "positions", 1), _shaped(scores, "scores", 1)
    if positions.shape[0] != scores.shape[0]:
        raise ValueError(
            f"dimension mismatch: expected {positions.shape[0]}, got {scores.shape[0]}"
        )
    if positions.shape[0] and positions.min() < 0:
        raise ValueError("positions must be >= 0")
    return _best(positions, scores, k)


# -- fusion -------------------------------------------------------------------------------


def _fuse(keys: Array, terms: Array, divisor: float, limit: int | None) -> tuple[Array, Array]:
    """Sums each key's terms largest first, divides, sorts by score desc then first insertion."""
    if keys.shape[0] == 0:
        return np.empty(0, np.int64), np.empty(0, np.float64)
    uniq, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    by_arrival = np.argsort(first, kind="stable")
    candidate = np.empty_like(by_arrival)
    candidate[by_arrival] = np.arange(by_arrival.shape[0])
    cand = candidate[inverse.reshape(-1)]
    # Terms grouped by candidate, largest first; `nth` = a term's place within its group.
    o = np.lexsort((-terms, cand))
    cand, terms = cand[o], terms[o]
    starts = np.flatnonzero(np.r_[True, cand[1:] != cand[:-1]])
    sizes = np.diff(np.r_[starts, cand.shape[0]])
    nth = np.arange(cand.shape[0]) - np.repeat(starts, sizes)
    sums = np.zeros(by_arrival.shape[0], np.float64)
    # One pass per place: every candidate adds its 1st term, then its 2nd, ... as the Rust loop.
    by_nth = np.argsort(nth, kind="stable")
    bounds = np.r_[0, np.cumsum(np.bincount(nth))]
    for a, b in itertools.pairwise(bounds.tolist()):
        idx = by_nth[a:b]
        sums[cand[idx]] += terms[idx]
    sums /= divisor
    ranked = np.lexsort((np.arange(sums.shape[0]), -sums))
    if limit is not None:
        ranked = ranked[:limit]
    arrival_keys = uniq[by_arrival]
    return arrival_keys[ranked].astype(np.int64), sums[ranked]


def rrf(
    rankings: Sequence[np.ndarray],
    *,
    k: int = 60,
    weights: Sequence[float] | None = None,
    limit: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Reciprocal-rank fusion: score(d) = sum over lists of weight / (k + rank + 1).

    Args:
        rankings: int64 key arrays, each best first. A negative key holds a rank without being
            a candidate (an excluded row still consumes its position, spec §4.10).
        k: >= 1.
        weights: one finite, non-negative weight per list; default 1.
        limit: keep at most this many.

    Returns:
        (keys int64, scores float64), best first; ties keep first-insertion order.
    """
    lists = _typed_list(rankings, _I64, "rankings")
    k = _int(k, "k")
    w = None if weights is None else _weights(weights)
    limit = None if limit is None else _int(limit, "limit")
    k = _count(k, "k")
    limit = None if limit is None else _count(limit, "limit")
    lists = [_shaped(r, "rankings[i]", 1) for r in lists]
    if k < 1:
        raise ValueError("k must be at least 1")
    if w is not None:
        if len(w) != len(lists):
            raise ValueError(f"weights has {len(w)} entries for {len(lists)} rankings")
        if any(not math.isfinite(x) or x < 0.0 for x in w):
            raise ValueError("weights must be finite and non-negative")
    keys, terms = [], []
    for i, ranking in enumerate(lists):
        weight = 1.0 if w is None else w[i]
        keep = np.flatnonzero(ranking >= 0)
        keys.append(ranking[keep])
        terms.append(weight / (k + keep + 1).astype(np.float64))
    return _fuse(_concat(keys, np.int64), _concat(terms, np.float64), 1.0, limit)


def _weights(weights: object) -> list[float]:
    if isinstance(weights, str | bytes) or not isinstance(weights, Sequence | np.ndarray):
        raise TypeError("weights must be a sequence of floats")
    return [_float(x, "weights[i]") for x in weights]


def _concat(parts: list[Array], dtype: type) -> Array:
    return np.concatenate(parts) if parts else np.empty(0, dtype)


def rsf(
    rankings: Sequence[np.ndarray],
    scores: Sequence[np.ndarray],
    *,
    limit: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Relative-score fusion over channels (spec §5.4).

    Each channel's defined scores are min–max normalised (equal scores or a lone member give
    1); a NaN score is undefined and gives 0, or 1 when no member is defined. The sum is divided
    by the number of non-empty channels.

    Args:
        rankings: int64 key arrays (>= 0), one per channel, each in its list order.
        scores: float64 arrays pairing with ``rankings``; NaN = undefined, infinities refused.
        limit: keep at most this many.

    Returns:
        (keys int64, scores float64), best first; ties keep first insertion (channels in order,
        each channel's defined-score rows before its undefined ones).
    """
    lists = _typed_list(rankings, _I64, "rankings")
    raws = _typed_list(scores, _F64, "scores")
    limit = None if limit is None else _count(_int(limit, "limit"), "limit")
    lists = [_shaped(r, "rankings[i]", 1) for r in lists]
    raws = [_shaped(s, "scores[i]", 1) for s in raws]
    if len(lists) != len(raws):
        raise ValueError(f"{len(lists)} rankings but {len(raws)} score lists")
    for ranking, raw in zip(lists, raws, strict=True):
        if ranking.shape[0] != raw.shape[0]:
            raise ValueError("each ranking needs one score per key")
        if ranking.shape[0] and ranking.min() < 0:
            raise ValueError("rsf keys must be non-negative")
        if np.isinf(raw).any():
            raise ValueError("rsf scores must be finite or NaN")
    keys, terms = [], []
    active = 0
    for ranking, raw in zip(lists, raws, strict=True):
        if ranking.shape[0] == 0:
            continue
        active += 1
        defined = ~np.isnan(raw)
        if defined.any():
            lo, hi = raw[defined].min(), raw[defined].max()
            norm = np.ones(int(defined.sum())) if hi == lo else (raw[defined] - lo) / (hi - lo)
            undefined_term = 0.0
        else:
            norm = np.empty(0)
            undefined_term = 1.0
        keys += [ranking[defined], ranking[~defined]]
        terms += [norm, np.full(int((~defined).sum()), undefined_term)]
    return _fuse(_concat(keys, np.int64), _concat(terms, np.float64), float(max(active, 1)), limit)


# -- the vector index file ------------------------------------------------------------------

_MAGIC = b"CPVECIX1"
_HEADER_LEN = 128
_SECTIONS = (
    ("ids", "<i8"),
    ("keys", "<i8"),
    ("times", "<i8"),
    ("agent", "<u8"),
    ("project", "<u8"),
    ("channel", "<u8"),
    ("source", "<u8"),
    ("flags", "u1"),
    ("order", "<u4"),
    ("vectors", "<f4"),
)
_FLAG_DELETED = 1
_FLAG_FOREIGN = 2


def _layout(dim: int, capacity: int) -> tuple[dict[str, int], int]:
    """Section offsets and the exact file size (docs/vector-index.md)."""
    offsets: dict[str, int] = {}
    end = _HEADER_LEN
    for name, dtype in _SECTIONS:
        start = -(-end // 64) * 64
        offsets[name] = start
        end = start + capacity * np.dtype(dtype).itemsize * (dim if name == "vectors" else 1)
    return offsets, end


def _time_range(since: object, until: object) -> tuple[int, int] | None:
    """``[lo, hi)`` of a time-scoped scan, None when neither bound is given (rust/py.rs)."""
    if since is None and until is None:
        return None
    # i64::MIN marks a row without an instant: a bounded range never admits it.
    lo = -_I64_MAX if since is None else max(_int(since, "since"), -_I64_MAX)
    hi = _I64_MAX if until is None else _int(until, "until")
    if hi < lo:
        raise ValueError(f"until ({hi}) is before since ({lo})")
    return lo, hi


def _u(buf: Array, offset: int, size: int, *, signed: bool = False) -> int:
    return int.from_bytes(buf[offset : offset + size].tobytes(), "little", signed=signed)


class VectorIndex:
    """A validated, read-only mapping of one vector index file (``np.memmap``, no copy).

    ``dim``, ``capacity``, ``table`` and ``db_uid`` are fixed for a file; ``count``, ``live``,
    ``applied_seq`` and ``dirty`` are read from the mapping on each access, because the sync
    appends in place.
    """

    __slots__ = ("_capacity", "_db_uid", "_dim", "_mm", "_table", "_views")
    _capacity: int
    _db_uid: bytes
    _dim: int
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
        if size < _HEADER_LEN:
            raise StoreCorrupt(
                f"corrupt vector file: file is {size} bytes, shorter than the 128-byte header"
            )
        mm = np.memmap(path, dtype=np.uint8, mode="r")
        if mm[:8].tobytes() != _MAGIC:
            raise StoreCorrupt("corrupt vector file: wrong magic")
        version, dim = _u(mm, 8, 4), _u(mm, 12, 4)
        if version != 2:
            raise StoreCorrupt(f"corrupt vector file: unsupported version {version}")
        if dim == 0:
            raise StoreCorrupt("corrupt vector file: dim is 0")
        count, capacity = _u(mm, 16, 8), _u(mm, 24, 8)
        if count > capacity:
            raise StoreCorrupt(f"corrupt vector file: count {count} exceeds capacity {capacity}")
        offsets, file_len = _layout(dim, capacity)
        if file_len != mm.shape[0]:
            raise StoreCorrupt(
                f"corrupt vector file: file is {mm.shape[0]} bytes, the header implies {file_len}"
            )
        views: dict[str, Array] = {}
        for name, dtype in _SECTIONS:
            shape = (capacity, dim) if name == "vectors" else (capacity,)
            views[name] = np.ndarray(shape, dtype=dtype, buffer=mm, offset=offsets[name])
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
            ("_views", views),
            ("_dim", dim),
            ("_capacity", capacity),
            ("_table", _u(mm, 56, 4)),
            ("_db_uid", mm[40:56].tobytes()),
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
        count = _u(self._mm, 16, 8)
        if count > self._capacity:
            raise StoreCorrupt(
                f"corrupt vector file: count {count} exceeds capacity {self._capacity}"
            )
        return count

    @property
    def live(self) -> int:
        return _u(self._mm, 64, 8)

    @property
    def applied_seq(self) -> int:
        return _u(self._mm, 32, 8, signed=True)

    @property
    def dirty(self) -> int:
        return _u(self._mm, 60, 4)

    @property
    def table(self) -> int:
        return self._table

    @property
    def db_uid(self) -> bytes:
        return self._db_uid

    def __repr__(self) -> str:
        return (
            f"VectorIndex(dim={self._dim}, count={_u(self._mm, 16, 8)}, "
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
        query = _typed(query, _F32, "query")
        agent = _u64(agent, "agent")
        named_sets = (("projects", projects), ("channels", channels), ("sources", sources))
        sets = [_typed(s, _U64, name) for name, s in named_sets]
        counts = [_int(v, n) for n, v in (("window", window), ("reach", reach))]
        threshold = _float(threshold, "threshold")
        counts += [
            _int(v, n)
            for n, v in (
                ("k", k),
                ("far_k", far_k),
                ("chunk_rows", chunk_rows),
                ("threads", threads),
            )
        ]
        names = ("window", "reach", "k", "far_k", "chunk_rows", "threads")
        window, reach, k, far_k, chunk_rows, _ = (
            _count(v, n) for v, n in zip(counts, names, strict=True)
        )
        times = _time_range(since, until)
        query = _shaped(query, "query", 1)
        sets = [_shaped(s, name, 1) for s, (name, _) in zip(sets, named_sets, strict=True)]
        if query.shape[0] != self._dim:
            raise ValueError(f"dimension mismatch: expected {self._dim}, got {query.shape[0]}")
        _threshold(threshold)
        if chunk_rows == 0:
            raise ValueError("chunk_rows must be at least 1")
        has_far = reach > window
        slots = self._in_scope(agent, sets, reach if has_far else window, times)
        if sums is not None:
            sums = _shaped(_typed(sums, np.dtype(np.uint32), "sums"), "sums", 1)
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
            mask = (v["flags"][walked] & _FLAG_DELETED) == 0
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
        return _concat(found, np.int64)

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
                scores = _dot_rows(vectors[last : first + 1], query)[::-1]
            else:
                scores = _dot_rows(vectors[chunk], query)
            # Foreign-width slots hold zero vectors: scored harmlessly, then dropped.
            keep = (flags[chunk] & _FLAG_FOREIGN) == 0
            if sums is not None:
                _check_sums(self._views, chunk, keep, slice(last, first + 1) if run else None, sums)
            keep &= scores.astype(np.float64) >= threshold
            positions = np.flatnonzero(keep).astype(np.int64) + lo
            # Per-chunk winners merged with the running best: memory stays O(chunk + k).
            best_pos, best_scores = _best(
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


_META = "\u2581"
_UNK_PENALTY = 10.0


def _f32(value: float) -> float:
    """`value` rounded to float32, as the Rust tokenizer keeps its path scores."""
    return array.array("f", (value,))[0]


class Unigram:
    """The twin of rust/unigram.rs: SentencePiece unigram over a model's own tables.

    Same normalisation, same Viterbi, same tie rule (the first path found wins; sums rounded
    to float32). Building it takes seconds for a 250,000-piece vocabulary, so `e5_engine`
    needs the Rust one; this one is the reference the tests hold it to.
    """

    def __init__(
        self,
        blob: bytes,
        offsets: np.ndarray,
        scores: np.ndarray,
        unk_id: int,
        norm_cp: np.ndarray,
        norm_off: np.ndarray,
        norm_out: np.ndarray,
    ) -> None:
        offsets = _shaped(_typed(offsets, np.dtype(np.uint32), "offsets"), "offsets", 1)
        scores = _shaped(_typed(scores, np.dtype(np.float32), "scores"), "scores", 1)
        norm_cp = _shaped(_typed(norm_cp, np.dtype(np.uint32), "norm_cp"), "norm_cp", 1)
        norm_off = _shaped(_typed(norm_off, np.dtype(np.uint32), "norm_off"), "norm_off", 1)
        norm_out = _shaped(_typed(norm_out, np.dtype(np.uint32), "norm_out"), "norm_out", 1)
        if len(offsets) != len(scores) + 1:
            raise ValueError("offsets must hold one more entry than scores")
        if not 0 <= unk_id < len(scores):
            raise ValueError("unk_id is not a piece id")
        self._pieces: dict[bytes, tuple[int, float]] = {}
        self._max_piece_bytes = 1
        for piece_id, (start, end) in enumerate(itertools.pairwise(offsets.tolist())):
            if start > end or end > len(blob):
                raise ValueError("piece offsets must rise within the blob")
            if start == end:
                continue
            self._max_piece_bytes = max(self._max_piece_bytes, end - start)
            self._pieces.setdefault(bytes(blob[start:end]), (piece_id, float(scores[piece_id])))
        self._unk_id = unk_id
        self._unk_score = _f32(float(scores.min()) - _UNK_PENALTY)
        if len(norm_off) != len(norm_cp) + 1:
            raise ValueError("norm_off must hold one more entry than norm_cp")
        self._norm: dict[int, str] = {}
        bounds = itertools.pairwise(norm_off.tolist())
        for cp, (start, end) in zip(norm_cp.tolist(), bounds, strict=True):
            if start > end or end > len(norm_out):
                raise ValueError("norm offsets must rise within norm_out")
            try:
                self._norm[cp] = "".join(map(chr, norm_out[start:end].tolist()))
                (chr(cp) + self._norm[cp]).encode("utf-8")
            except (ValueError, UnicodeEncodeError) as exc:
                raise ValueError("bad code point") from exc

    def normalize(self, text: str) -> str:
        chars: list[str] = []
        for c in text.translate(self._norm):
            for o in c:
                if not (o == " " and chars and chars[-1] == " "):
                    chars.append(o)
        joined = "".join(chars)
        prefix = "" if joined.startswith(" ") else _META
        return prefix + joined.replace(" ", _META)

    def encode(self, text: str) -> list[int]:
        chars = self.normalize(text)
        ends = [0]
        for c in chars:
            ends.append(ends[-1] + len(c.encode("utf-8")))
        raw = chars.encode("utf-8")
        n = len(chars)
        best = [-math.inf] * (n + 1)
        piece = [self._unk_id] * (n + 1)
        source = [0] * (n + 1)
        best[0] = 0.0
        for i in range(n):
            here = best[i]
            for e in range(i + 1, n + 1):
                span = raw[ends[i] : ends[e]]
                if len(span) > self._max_piece_bytes:
                    break
                hit = self._pieces.get(span)
                if hit is not None:
                    total = _f32(here + hit[1])
                    if hit[0] != self._unk_id and total > best[e]:
                        best[e], piece[e], source[e] = total, hit[0], i
            total = _f32(here + self._unk_score)
            if total > best[i + 1]:
                best[i + 1], piece[i + 1], source[i + 1] = total, self._unk_id, i
        ids: list[int] = []
        at = n
        while at > 0:
            ids.append(piece[at])
            at = source[at]
        return ids[::-1]
