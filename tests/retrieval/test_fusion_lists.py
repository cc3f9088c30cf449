"""Fusion over any number of ranked lists (issue 31): rrf with a weight per list against a
plain-Python oracle (hypothesis), the row object fusion keeps per identity, the exclusions'
held ranks; and rsf refusing weights it cannot apply."""

from __future__ import annotations

from types import ModuleType

import pytest
from cpersona.retrieval.candidates import Candidate
from cpersona.retrieval.channel import RankedList
from cpersona.retrieval.fusion import Fusion
from hypothesis import given
from hypothesis import strategies as st

K = 60
EXCLUDED = "excluded text"


def _row(key: int, list_no: int, excluded: bool) -> Candidate:
    kind, row_id = ("ep", key // 2) if key % 2 else ("mem", key // 2)
    content = EXCLUDED if excluded else f"row {key} of list {list_no}"
    return Candidate(kind, row_id, content, None, "", cosine=0.5, bm25=-1.0)


@st.composite
def ranked_lists(draw: st.DrawFn) -> list[RankedList]:
    lists = []
    for n in range(draw(st.integers(1, 5))):
        keys = draw(st.lists(st.integers(0, 30), max_size=12, unique=True))
        excluded = draw(st.sets(st.sampled_from(keys))) if keys else set()
        lists.append(
            RankedList(
                f"list{n}",
                rows=[_row(k, n, k in excluded) for k in keys],
                excludable=draw(st.booleans()),
                keeps_row=draw(st.integers(0, 2)),
                ties=draw(st.integers(0, 1)),
                weight=draw(st.sampled_from([0.0, 0.5, 1.0, 2.0])),
            )
        )
    return lists


def oracle(lists: list[RankedList]) -> tuple[list[int], list[float], dict[int, Candidate]]:
    """rrf as §5.3 says it: sum over lists of weight / (k + rank + 1), an excluded row holding
    its rank; ties to the key first met reading the lists in tie order; per key, the row of
    the list first in keeps_row order (then tie order)."""
    ordered = sorted(lists, key=lambda lst: lst.ties)

    def gone(lst: RankedList, row: Candidate) -> bool:
        return lst.excludable and row.content == EXCLUDED

    scores: dict[int, float] = {}
    for lst in ordered:
        for rank, row in enumerate(lst.rows):
            if not gone(lst, row):
                scores[row.key] = scores.get(row.key, 0.0) + lst.weight / (K + rank + 1)
    keys = sorted(scores, key=lambda key: -scores[key])  # stable: first met wins ties
    kept: dict[int, Candidate] = {}
    for lst in sorted(ordered, key=lambda lst: lst.keeps_row):
        for row in lst.rows:
            if not gone(lst, row):
                kept.setdefault(row.key, row)
    return keys, [scores[key] for key in keys], kept


@given(lists=ranked_lists())
def test_rrf_over_any_number_of_weighted_lists_is_the_oracle(
    lists: list[RankedList], kernels: ModuleType
) -> None:
    keys, scores, kept = oracle(lists)
    fused = Fusion(kernels, K)("rrf", lists, [EXCLUDED])
    assert [row.key for row in fused] == keys
    assert [row.rrf for row in fused] == pytest.approx(scores, rel=1e-12)
    assert all(row is kept[row.key] for row in fused)


def test_rsf_refuses_list_weights(kernels: ModuleType) -> None:
    lists = [RankedList("a", rows=[_row(2, 0, False)], weight=2.0)]
    with pytest.raises(ValueError, match="rsf takes no list weights"):
        Fusion(kernels, K)("rsf", lists, [])
