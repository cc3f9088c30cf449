"""The numpy twin of rust/py/fusion.rs: reciprocal-rank and relative-score fusion.

Each candidate's terms are summed largest first in float64, as the Rust core sums them, so
fused scores are identical bits.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import numpy as np

from cpersona._fallback.args import (
    F64,
    I64,
    Array,
    as_float,
    as_int,
    concat,
    non_negative,
    shaped,
    typed_list,
)


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
    lists = typed_list(rankings, I64, "rankings")
    k = as_int(k, "k")
    w = None if weights is None else _weights(weights)
    limit = None if limit is None else as_int(limit, "limit")
    k = non_negative(k, "k")
    limit = None if limit is None else non_negative(limit, "limit")
    lists = [shaped(r, "rankings[i]", 1) for r in lists]
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
    return _fuse(concat(keys, np.int64), concat(terms, np.float64), 1.0, limit)


def _weights(weights: object) -> list[float]:
    if isinstance(weights, str | bytes) or not isinstance(weights, Sequence | np.ndarray):
        raise TypeError("weights must be a sequence of floats")
    return [as_float(x, "weights[i]") for x in weights]


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
    lists = typed_list(rankings, I64, "rankings")
    raws = typed_list(scores, F64, "scores")
    limit = None if limit is None else non_negative(as_int(limit, "limit"), "limit")
    lists = [shaped(r, "rankings[i]", 1) for r in lists]
    raws = [shaped(s, "scores[i]", 1) for s in raws]
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
    return _fuse(concat(keys, np.int64), concat(terms, np.float64), float(max(active, 1)), limit)
