"""The statistics of calibration (retrieval.md §15.3 steps 3-6): pure numpy, no database.

A null distribution (scores of unrelated pairs) and a positive one (scores of related pairs)
go in; a threshold that separates them comes out.
"""

from __future__ import annotations

import itertools
import math
from datetime import datetime

import numpy as np

from cpersona.memory.text import parse_utc
from cpersona.storage.calibration import TimedEmbedding

#: Candidate thresholds tried by `sep` (evenly spaced over the observed range).
SEP_CANDIDATES = 256
#: Rows of the Gram matrix computed at once (bounds the working memory at 5000 samples).
_GRAM_BLOCK = 256


def round4(x: float) -> float:
    """round_4 of retrieval.md §0: Python's round (half-even on the exact binary value)."""
    return round(float(x), 4)


def decode_modal(blobs: list[bytes]) -> np.ndarray:
    """Stored BLOBs as rows of the most common width (ties -> the wider).

    Blobs whose length is not a multiple of 4 or that hold a non-finite value are dropped.

    Returns:
        (n, dim) float32; (0, 0) when nothing usable is left.
    """
    by_width: dict[int, list[np.ndarray]] = {}
    for blob in blobs:
        if not blob or len(blob) % 4:
            continue
        vec = np.frombuffer(blob, dtype="<f4")
        if not np.all(np.isfinite(vec)):
            continue
        by_width.setdefault(vec.shape[0], []).append(vec)
    if not by_width:
        return np.zeros((0, 0), dtype=np.float32)
    width = max(by_width, key=lambda w: (len(by_width[w]), w))
    return np.ascontiguousarray(np.stack(by_width[width]), dtype=np.float32)


def gram_stats(vectors: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The null distribution and each vector's nearest-neighbour score.

    Args:
        vectors: (n, dim) float32, n >= 2; used raw (not re-normalised).

    Returns:
        (x, nn): x is every v_i . v_j with i < j, float64 of length n(n-1)/2, row by row;
        nn[i] = max over j != i of v_i . v_j, float64 of length n.
    """
    v = vectors.astype(np.float64)
    n = v.shape[0]
    x = np.empty(n * (n - 1) // 2, dtype=np.float64)
    nn = np.empty(n, dtype=np.float64)
    at = 0
    for start in range(0, n, _GRAM_BLOCK):
        block = v[start : start + _GRAM_BLOCK] @ v.T
        for r in range(block.shape[0]):
            i = start + r
            tail = block[r, i + 1 :]
            x[at : at + tail.shape[0]] = tail
            at += tail.shape[0]
            block[r, i] = -np.inf
        nn[start : start + block.shape[0]] = block.max(axis=1)
    return x, nn


def quantile(sorted_x: np.ndarray, p: float) -> float:
    """The p-quantile with linear interpolation between order statistics (numpy 'linear')."""
    m = sorted_x.shape[0]
    h = (m - 1) * p
    lo = math.floor(h)
    hi = min(lo + 1, m - 1)
    return float(sorted_x[lo] + (h - lo) * (sorted_x[hi] - sorted_x[lo]))


def admit_rate(sorted_x: np.ndarray, total: int, threshold: float) -> float:
    """|{x >= threshold}| / total over an ascending array without NaNs."""
    if total <= 0:
        return 0.0
    kept = int(sorted_x.shape[0]) - int(np.searchsorted(sorted_x, threshold, side="left"))
    return kept / total


def sep(
    null: np.ndarray | list[float],
    pos: np.ndarray | list[float],
    floor: float,
    beta: float,
) -> tuple[float, float]:
    """The threshold that best separates positives from nulls, and Youden's J there.

    Tries SEP_CANDIDATES evenly spaced values from the smallest to the largest score seen and
    picks the first maximising TPR + beta * (1 - FPR); a larger beta weighs rejecting nulls
    more, so the threshold moves up. NaNs are never admitted but count in the denominators.

    Returns:
        (max(candidate, floor), TPR - FPR at the candidate).
    """
    x = np.asarray(null, dtype=np.float64)
    y = np.asarray(pos, dtype=np.float64)
    xs = np.sort(x[~np.isnan(x)])
    ys = np.sort(y[~np.isnan(y)])
    if xs.size + ys.size == 0:
        return floor, 0.0
    lo = float(min(xs[0] if xs.size else np.inf, ys[0] if ys.size else np.inf))
    hi = float(max(xs[-1] if xs.size else -np.inf, ys[-1] if ys.size else -np.inf))
    if hi <= lo:
        return max(lo, floor), 0.0
    cands = np.linspace(lo, hi, SEP_CANDIDATES)
    tpr = (ys.size - np.searchsorted(ys, cands, side="left")) / max(y.size, 1)
    fpr = (xs.size - np.searchsorted(xs, cands, side="left")) / max(x.size, 1)
    j = int(np.argmax(tpr + beta * (1.0 - fpr)))
    return max(float(cands[j]), floor), float(tpr[j] - fpr[j])


def temporal_positives(rows: list[TimedEmbedding], width: int, window_seconds: float) -> np.ndarray:
    """Cosines of consecutive memories (by time) written at most `window_seconds` apart.

    Rows with an unparseable stamp, a corrupt BLOB or another width than `width` are dropped.
    """
    timed: list[tuple[datetime, np.ndarray]] = []
    for row in rows:
        t = parse_utc(row.timestamp)
        if t is None or len(row.blob) != 4 * width:
            continue
        vec = np.frombuffer(row.blob, dtype="<f4").astype(np.float64)
        if not np.all(np.isfinite(vec)):
            continue
        norm = float(np.linalg.norm(vec))
        timed.append((t, vec / (norm if norm > 0 else 1.0)))
    timed.sort(key=lambda item: item[0])
    out = [
        float(a @ b)
        for (ta, a), (tb, b) in itertools.pairwise(timed)
        if (tb - ta).total_seconds() <= window_seconds
    ]
    return np.asarray(out, dtype=np.float64)
