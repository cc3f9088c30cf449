"""The quality gate's heuristic threshold m(N) and the recall-count bookkeeping.

m(N) = round4(0.5 - 0.3 * min(1, ln(N + 1) / ln 500)) over the scope's pool N (memories +
episodes); `deep` halves it; rrf-only rows are compared on the rrf scale m * 3/(k + 1).
Recall counts are written only with confidence on, for returned memory rows, and never for a
deep recall. Spec: retrieval.md §7, §12.
"""

from __future__ import annotations

import math

import pytest
from recall_support import IDENT, LEXICAL

pytestmark = pytest.mark.anyio


def m(pool: int) -> float:
    return 0.5 if pool <= 0 else round(0.5 - 0.3 * min(1.0, math.log(pool + 1) / math.log(500)), 4)


WORDS = ["deploy", "pipeline", "friday", "cache", "bucket", "release", "train", "ramen"]


async def cosines(t, deep: bool) -> dict[str, float]:
    messages = await t.messages("deploy pipeline friday", deep=deep, limit=100)
    # Unscored keyword rows (a pool of 100+ lets them in) are not the point here.
    return {x["content"]: x["match_reason"]["cosine"] for x in messages if "match_reason" in x}


@pytest.mark.parametrize("extra", [0, 40, 150])
async def test_cosine_rows_pass_iff_above_m_of_the_pool(connect, extra):
    notes = [" ".join(WORDS[i : i + 3]) for i in range(len(WORDS) - 2)]
    notes += [f"{WORDS[i]} note" for i in range(len(WORDS))]
    async with connect() as t:
        await t.store_all(notes)
        await t.store_all([f"zz{i}" for i in range(extra)])
        await t.episode("qq retro")
    pool = len(notes) + extra + 1
    # cascade, no autocut, threshold 0: every positive cosine is a candidate, gated on cosine.
    knobs = {"recall_mode": "cascade", "autocut_enabled": False, "vector_min_similarity": 0.0}
    async with connect(**knobs) as t:
        deep = await cosines(t, deep=True)
        strict = await cosines(t, deep=False)
    gate = m(pool)
    assert strict == {c: v for c, v in deep.items() if v >= gate}
    assert all(v >= gate / 2 for v in deep.values())
    assert strict
    if extra == 0:  # N = 15: m = 0.3338, between the corpus's cosine levels
        assert len(deep) > len(strict)


async def test_rrf_only_rows_use_the_rrf_scale(connect):
    # A keyword-only row: rrf 1/61 against m(N) * 3/61, i.e. it passes iff m(N) <= 1/3.
    async with connect() as t:
        await t.store(LEXICAL)
        small = await t.contents(IDENT)  # N = 1: m = 0.4665 > 1/3
        await t.store_all([f"zz{i}" for i in range(12)])  # N = 13: m = 0.3699
        medium = await t.contents(IDENT)
        await t.store_all([f"yy{i}" for i in range(10)])  # N = 23: m = 0.3488
        still = await t.contents(IDENT)
        await t.store_all([f"xx{i}" for i in range(10)])  # N = 33: m = 0.3313 <= 1/3
        large = await t.contents(IDENT)
    assert m(33) <= 1 / 3 < m(23)
    assert small == medium == still == []
    assert large == [LEXICAL]


async def _scores(t, query: str) -> dict[str, float]:
    return {
        msg["content"]: msg["confidence"]["score"] for msg in await t.messages(query, limit=100)
    }


NOTES = ["ledger note alpha", "ledger note beta", "ledger note gamma"]


async def test_confidence_recall_marks_returned_memories_only(connect):
    knobs = {"confidence_enabled": True, "autocut_enabled": False}
    async with connect(db_path="a.db", **knobs) as a, connect(db_path="b.db", **knobs) as b:
        for t in (a, b):
            await t.store_all(NOTES)
        fresh = await _scores(b, "ledger note alpha")
        await a.messages("ledger note alpha", limit=1)  # returns (and marks) alpha only
        later = await _scores(a, "ledger note alpha")
    # Scores are rounded to 4 decimals and the two recalls run milliseconds apart.
    assert later["ledger note alpha"] == pytest.approx(fresh["ledger note alpha"] * 0.7, abs=2e-4)
    for other in NOTES[1:]:
        if other in fresh:
            assert later[other] == pytest.approx(fresh[other], abs=2e-4)


@pytest.mark.parametrize(
    "first", [{"deep": True}, {"confidence": False}], ids=["deep", "confidence-off"]
)
async def test_no_bookkeeping_for_deep_or_confidence_off(connect, first):
    async with (
        connect(db_path="a.db", confidence_enabled=True) as a,
        connect(db_path="a.db") as plain,
        connect(db_path="b.db", confidence_enabled=True) as b,
    ):
        for t in (a, b):
            await t.store_all(NOTES)
        runner = plain if first.get("confidence") is False else a
        assert await runner.messages("ledger note alpha", deep=first.get("deep", False))
        marked, fresh = await _scores(a, "ledger note alpha"), await _scores(b, "ledger note alpha")
    assert marked == pytest.approx(fresh, abs=2e-4)  # no 0.7 recent-recall penalty


async def test_blank_query_under_confidence_scores_without_cosines(connect):
    async with connect(confidence_enabled=True) as t:
        await t.store_all(NOTES)
        messages = await t.messages("  ")
    assert [m["content"] for m in messages][-1] in NOTES
    assert all(
        "cosine" not in m["confidence"] and m["match_reason"]["signal"] == "confidence"
        for m in messages
    )
