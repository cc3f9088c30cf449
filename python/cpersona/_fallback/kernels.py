"""The numpy twin of rust/py/kernels.rs: dot products of rows with a query and top-k
selection under the Rust core's total order (score descending as ``f32::total_cmp`` orders
it, then position ascending)."""

from __future__ import annotations

import numpy as np

from cpersona._fallback.args import (
    F32,
    I64,
    I64_MAX,
    Array,
    as_float,
    as_int,
    check_threshold,
    non_negative,
    shaped,
    typed,
)


def dot_rows(rows: Array, query: Array) -> Array:
    """(n,) float32 scores; each row summed on its own, and -0.0 made +0.0 as in Rust."""
    scores: Array = np.einsum("ij,j->i", rows, query)
    # Rust's accumulators start at +0.0, so an all-zero sum is +0.0; total order tells them apart.
    scores += np.float32(0.0)
    return scores


def _total_key(scores: Array) -> Array:
    """int64 keys that order float32 values as ``f32::total_cmp`` does."""
    bits = scores.view(np.int32).astype(np.int64)
    return np.where(bits < 0, bits ^ 0x7FFFFFFF, bits)


def best(positions: Array, scores: Array, k: int) -> tuple[Array, Array]:
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


def _rows_and_query(rows: Array, query: Array) -> tuple[Array, Array]:
    rows = shaped(rows, "rows", 2)
    query = shaped(query, "query", 1)
    if rows.shape[1] == 0:
        raise ValueError("rows must have at least one column")
    if query.shape[0] != rows.shape[1]:
        raise ValueError(f"dimension mismatch: expected {rows.shape[1]}, got {query.shape[0]}")
    return rows, query


def scan_dot(rows: np.ndarray, query: np.ndarray) -> np.ndarray:
    """Dot product of every row with the query.

    Args:
        rows: (n, dim) float32, C-contiguous, dim >= 1.
        query: (dim,) float32.

    Returns:
        (n,) float32 scores.
    """
    rows, query = _rows_and_query(typed(rows, F32, "rows"), typed(query, F32, "query"))
    return dot_rows(rows, query)


def top_k(scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The best k scores: (positions int64, scores float32), by (score desc, position asc).

    Args:
        scores: (n,) float32.
        k: >= 0; more than n returns all n.
    """
    scores, k = typed(scores, F32, "scores"), as_int(k, "k")
    k = non_negative(k, "k")
    scores = shaped(scores, "scores", 1)
    return best(np.arange(scores.shape[0], dtype=np.int64), scores, k)


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
    rows, query = typed(rows, F32, "rows"), typed(query, F32, "query")
    threshold = as_float(threshold, "threshold")
    k, base = as_int(k, "k"), as_int(base_position, "base_position")
    k, base = non_negative(k, "k"), non_negative(base, "base_position")
    rows, query = _rows_and_query(rows, query)
    if base + rows.shape[0] > I64_MAX:
        raise ValueError("base_position + rows exceeds int64")
    check_threshold(threshold)
    scores = dot_rows(rows, query)
    keep = np.flatnonzero(scores.astype(np.float64) >= threshold)
    return best(keep.astype(np.int64) + base, scores[keep], k)


def merge_top_k(positions: np.ndarray, scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The best k of (positions[i], scores[i]) pairs, e.g. concatenated ``scan_chunk`` results.

    Args:
        positions: (n,) int64, >= 0.
        scores: (n,) float32.

    Returns:
        (positions int64, scores float32), best first.
    """
    positions, scores = typed(positions, I64, "positions"), typed(scores, F32, "scores")
    k = non_negative(as_int(k, "k"), "k")
    positions, scores = shaped(positions, "positions", 1), shaped(scores, "scores", 1)
    if positions.shape[0] != scores.shape[0]:
        raise ValueError(
            f"dimension mismatch: expected {positions.shape[0]}, got {scores.shape[0]}"
        )
    if positions.shape[0] and positions.min() < 0:
        raise ValueError("positions must be >= 0")
    return best(positions, scores, k)
