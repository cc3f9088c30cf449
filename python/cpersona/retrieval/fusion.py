"""Fusion (retrieval.md §5): rrf or rsf over any number of ranked lists, and the cascade.

The lists arrive as the channels made them (retrieval/channel.py RankedList); each says which
of its rows the caller's exclusions may drop, which score rsf normalises, its place in the
order fusion breaks ties by, and its weight (rrf's; rsf takes none).
"""

from __future__ import annotations

from collections.abc import Sequence
from types import ModuleType

import numpy as np

from cpersona.retrieval.candidates import Candidate
from cpersona.retrieval.channel import RankedList
from cpersona.retrieval.query import is_excluded


def kept(lst: RankedList, exclusions: Sequence[str]) -> list[bool]:
    """Per row of `lst`, whether the exclusions leave it (§4.10)."""
    if not (lst.excludable and exclusions):
        return [True] * len(lst.rows)
    return [not is_excluded(r.content, exclusions) for r in lst.rows]


class Fusion:
    """rrf (with constant `k`) and rsf in `kernels`."""

    def __init__(self, kernels: ModuleType, k: int) -> None:
        self.kernels = kernels
        self.k = k

    def __call__(
        self, mode: str, lists: Sequence[RankedList], exclusions: Sequence[str]
    ) -> list[Candidate]:
        """The lists fused by `mode` ("rrf" or "rsf"), best first; each row's fused score set
        on it (`rrf` / `rsf`)."""
        return _fuse(mode, lists, exclusions, self)


def _fuse(
    mode: str, lists: Sequence[RankedList], exclusions: Sequence[str], by: Fusion
) -> list[Candidate]:
    # Ties go to the lists first in fusion's order: M, then V, F, then E (2.5.x: V, F, E, M).
    # A vector arm that cannot read the language (MiniLM on Japanese) otherwise wins every tie
    # with BM25's first row: JSQuAD R@1 0.32 -> 0.68 under rrf; an episode, which summarises
    # the turns that answer, no longer wins a tie with them (issue 30, docs/quality.md).
    ordered = sorted(lists, key=lambda lst: lst.ties)
    masks = [kept(lst, exclusions) for lst in ordered]
    by_key: dict[int, Candidate] = {}
    for i in sorted(range(len(ordered)), key=lambda i: ordered[i].keeps_row):
        for row, keep in zip(ordered[i].rows, masks[i], strict=True):
            if keep:
                by_key.setdefault(row.key, row)
    if mode == "rrf":
        # An excluded row keeps its rank (key -1): the rows after it are not promoted (§4.10).
        rankings = [
            np.array(
                [r.key if keep else -1 for r, keep in zip(lst.rows, mask, strict=True)],
                dtype=np.int64,
            )
            for lst, mask in zip(ordered, masks, strict=True)
        ]
        weights = [lst.weight for lst in ordered]
        if all(w == 1.0 for w in weights):
            keys, scores = by.kernels.rrf(rankings, k=by.k)
        else:
            keys, scores = by.kernels.rrf(rankings, k=by.k, weights=weights)
    else:
        if any(lst.weight != 1.0 for lst in ordered):
            raise ValueError("rsf takes no list weights (retrieval.md §5.4)")
        rankings, raws = [], []
        for lst, mask in zip(ordered, masks, strict=True):
            rows = [r for r, keep in zip(lst.rows, mask, strict=True) if keep]
            rankings.append(np.array([r.key for r in rows], dtype=np.int64))
            raws.append(np.array([_raw(r, lst) for r in rows], dtype=np.float64))
        keys, scores = by.kernels.rsf(rankings, raws)
    out = []
    for key, score in zip(keys.tolist(), scores.tolist(), strict=True):
        row = by_key[key]
        setattr(row, mode, float(score))
        out.append(row)
    return out


def _raw(row: Candidate, lst: RankedList) -> float:
    """The score rsf normalises: the cosine, or the negated bm25 (NaN where there is none)."""
    if lst.score == "cosine":
        return float("nan") if row.cosine is None else row.cosine
    return -row.bm25 if row.bm25 is not None else float("nan")


def admitted(lst: RankedList, exclusions: Sequence[str]) -> list[Candidate]:
    """The rows of `lst` the exclusions leave (the cascade's filter)."""
    return [r for r, keep in zip(lst.rows, kept(lst, exclusions), strict=True) if keep]
