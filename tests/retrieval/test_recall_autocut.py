"""Contract 6: autocut fires only on similarity-scale signals.

It cuts at the largest score gap under confidence scoring, or in a homogeneous raw-cosine list
(cascade whose rows all came from the vector arm). Under rrf / rsf ordering it is inert, so
CPERSONA_AUTOCUT_MIN_RESULTS does not change recall counts there. The profile row is neither
measured nor cut. Spec: retrieval.md §11.
"""

from __future__ import annotations

import pytest
from support.mcp_client import AGENT

pytestmark = pytest.mark.anyio

# One exact match and several weak partial matches: a big gap after the first row.
CORPUS = [
    "the deploy pipeline runs on friday",
    "deploy keys rotate every month",
    "the pipeline cache lives in the bucket",
    "friday standup moved to ten",
    "lunch order is ramen on friday",
    "the release train leaves on friday afternoon",
    "staging deploy needs manual approval",
]
QUERIES = ["the deploy pipeline runs on friday", "deploy pipeline", "friday", "ramen"]


async def counts(connect, **settings) -> list[int]:
    async with connect(**settings) as t:
        return [len(await t.messages(q, deep=True)) for q in QUERIES]


async def _corpus(connect) -> None:
    async with connect() as t:
        await t.store_all(CORPUS)


@pytest.mark.parametrize("mode", ["rrf", "rsf"])
async def test_min_results_and_gap_ratio_change_nothing_under_fusion(connect, mode):
    await _corpus(connect)
    base = await counts(connect, recall_mode=mode, autocut_enabled=False)
    assert max(base) >= 3
    for knobs in (
        {},
        {"autocut_min_results": 2},
        {"autocut_min_results": 50},
        {"autocut_min_gap_ratio": 0.0},
        {"autocut_min_gap_ratio": 0.99},
    ):
        assert await counts(connect, recall_mode=mode, **knobs) == base, knobs


@pytest.mark.parametrize(
    "settings",
    [
        {"recall_mode": "cascade"},
        {"confidence_enabled": True},
        {"confidence_enabled": True, "recall_mode": "rsf"},
    ],
    ids=["cascade-cosine", "confidence-rrf", "confidence-rsf"],
)
async def test_autocut_fires_on_similarity_signals(connect, settings):
    await _corpus(connect)
    exact = QUERIES[0]

    async def run(**knobs) -> list[str]:
        async with connect(**settings, **knobs) as t:
            return await t.contents(exact, deep=True)

    uncut = await run(autocut_enabled=False)
    assert len(uncut) >= 3 and uncut[-1] == exact
    assert await run() == [exact]  # the gap after the exact match is the largest
    assert await run(autocut_min_gap_ratio=0.99) == uncut
    assert await run(autocut_min_results=len(uncut)) == [exact]
    assert await run(autocut_min_results=len(uncut) + 1) == uncut


async def test_cascade_with_lexical_rows_is_inert(connect):
    # FTS / keyword rows carry no cosine: the list is not homogeneous, nothing is cut.
    async with connect() as t:
        await t.store_all(CORPUS)
        await t.store(
            "Quarterly digest: we rotated credentials, refreshed pins, reviewed "
            "firewall rules, archived accounts and scheduled the next deploy window"
        )
        await t.store_all([f"filler row {i}" for i in range(100)])  # unscored rows pass
    async with connect(recall_mode="cascade") as t:
        cut = await t.messages("deploy", deep=True)
    async with connect(recall_mode="cascade", autocut_enabled=False) as t:
        uncut = await t.messages("deploy", deep=True)
    assert any("match_reason" not in m for m in uncut)
    assert cut == uncut


async def test_the_profile_is_neither_measured_nor_cut(connect):
    async with connect() as t:
        await t.store_all(CORPUS)
        await t.store_all([f"filler row {i}" for i in range(50)])  # pool >= 50: profile passes
        await t("update_profile", {"agent_id": AGENT, "profile": "prefers short answers"})
    async with connect(confidence_enabled=True) as t:
        got = await t.contents(QUERIES[0], deep=True, limit=100)
    assert "[Profile] prefers short answers" in got
    assert QUERIES[0] in got
    assert len(got) == 2
