"""Fusion ties go to the lexical lists (cpersona's deviation from 2.5.x's vector-first order).

A vector-only row and a keyword-only row at the same rank get the same rrf score (and the same
rsf score). 2.5.x breaks the tie by list order, vector first, so a vector arm that cannot read
the language (MiniLM on Japanese) pushed BM25's answer off the top: JSQuAD R@1 0.32 under
MiniLM + rrf, 0.68 with lexical-first ties (docs/quality.md). Scores are untouched.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

pytestmark = pytest.mark.anyio


class Steered:
    """Queries point along e0; a passage naming "summit" too, every other passage along e1."""

    name = "steered"
    available = True

    def dim(self) -> int:
        return 8

    def embed(self, texts: Sequence[str], *, kind: str = "passage") -> np.ndarray:
        out = np.zeros((len(texts), 8), dtype=np.float32)
        for i, text in enumerate(texts):
            out[i, 0 if kind == "query" or "summit" in text else 1] = 1.0
        return out

    def close(self) -> None:
        pass


# 40 fillers keep the pool large enough that the heuristic gate keeps single-list rows.
FILLER = [f"routine note {i} about errands and chores" for i in range(40)]
LEXICAL = "We crossed the glacier at dawn"  # the keyword list's only row; cosine 0
VECTOR = "Photo from the summit"  # the vector list's only row; no query word


@pytest.mark.parametrize("mode", ["rrf", "rsf"])
async def test_fusion_tie_goes_to_the_lexical_row(connect, mode: str) -> None:
    async with connect(embedder=Steered()) as t:
        await t.store_all([*FILLER, LEXICAL, VECTOR])
    async with connect(embedder=Steered(), recall_mode=mode) as t:
        got = await t.messages("glacier")
    assert [m["content"] for m in got] == [VECTOR, LEXICAL]  # best match last
    first, second = (m["match_reason"][mode] for m in got)
    assert first == second  # a tie: only the order rule separates them
