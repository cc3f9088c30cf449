"""Contract 4: the vector scan window (CPERSONA_MAX_MEMORIES), the reach and the far list.

The window is the newest N embedded rows of each table within the call's scope: older rows
are invisible to the vector arm but FTS and keyword search still reach them. With
CPERSONA_VECTOR_REACH above the window, rows between the window and the reach are ranked as a
second list (rrf / rsf only): they add votes and rows, never change the near rows' votes, and
never make a row the same query returned without them disappear (retrieval.md §19.2).
CPERSONA_VECTOR_FAR_LIMIT only caps how many far rows vote. Spec: retrieval.md §4.2-4.3, §4.7.
"""

from __future__ import annotations

import pytest
from cpersona.storage.db import embedding_param

pytestmark = pytest.mark.anyio

# X is similar to QUERY (cosine ~0.59 with the hashing embedder) but shares no 3-character
# term with it, so only the vector arm can find it for QUERY; FTS finds it for "kubernetes".
X = "rollout strategy for kubernetes clusters"
QUERY = "rollouts strategies kubernetes-cluster"
FILLERS = [f"lunch menu item {i}" for i in range(6)]
NEAR = ["kubernetes upgrade checklist", "cluster rollout calendar", "rollout strategies review"]
WINDOW = len(FILLERS) + len(NEAR)  # the rows newer than X


async def _corpus(connect) -> None:
    async with connect() as t:
        await t.store(X)
        await t.store_all(FILLERS)
        await t.store_all(NEAR)


async def answer(connect, query: str = QUERY, **settings) -> dict[str, dict]:
    async with connect(**settings) as t:
        return {m["content"]: m.get("match_reason") for m in await t.messages(query, deep=True)}


async def test_a_row_leaves_the_vector_window_but_stays_reachable(connect, store_backend):
    await _corpus(connect)
    inside = await answer(connect, max_memories=WINDOW + 1)
    assert inside[X]["signal"] == "cosine"
    outside = await answer(connect, max_memories=WINDOW)
    assert X not in outside
    assert set(outside) == {c for c in inside if c != X}
    # Through FTS (and the LIKE fallback), with no window: rrf-only, no cosine.
    fts = await answer(connect, "kubernetes", max_memories=WINDOW)
    assert fts[X]["signal"] == "rrf" and "cosine" not in fts[X]
    like = await answer(connect, "kub", max_memories=0)
    assert X in like and "cosine" not in like[X]


async def test_reach_above_the_window_returns_the_row_and_keeps_near_votes(connect):
    await _corpus(connect)
    base = await answer(connect, max_memories=WINDOW)
    for reach in (WINDOW - 1, WINDOW):  # at or below the window nothing changes
        assert await answer(connect, max_memories=WINDOW, vector_reach=reach) == base
    for reach in (WINDOW + 1, 10_000):
        far = await answer(connect, max_memories=WINDOW, vector_reach=reach)
        assert far[X]["signal"] == "cosine"
        inside = await answer(connect, max_memories=WINDOW + 1)
        assert far[X]["cosine"] == inside[X]["cosine"]  # same dot product, same threshold
        assert {c: r for c, r in far.items() if c != X} == base  # near votes unchanged
        assert far[X]["rrf"] == 1 / 61  # rank 0 of the far list


async def test_reach_under_rsf_is_a_fourth_channel(connect):
    await _corpus(connect)
    base = await answer(connect, recall_mode="rsf", max_memories=WINDOW)
    far = await answer(connect, recall_mode="rsf", max_memories=WINDOW, vector_reach=100)
    assert X in far and X not in base
    # The far list is one more active channel: every fused score is divided by one more.
    for content, reason in far.items():
        if content != X and content in base:
            assert reason["rsf"] < base[content]["rsf"]


async def test_cascade_ignores_the_reach(connect):
    await _corpus(connect)
    base = await answer(connect, recall_mode="cascade", max_memories=WINDOW)
    reach = await answer(connect, recall_mode="cascade", max_memories=WINDOW, vector_reach=100)
    assert X not in reach and reach == base


async def test_far_limit_caps_the_far_votes_only(connect):
    olds = [
        "rollout strategy for kubernetes clusters",
        "kubernetes rollout strategy",
        "strategy for rollout of clusters",
    ]
    async with connect() as t:
        await t.store_all(olds)
        await t.store_all(FILLERS)
    window = len(FILLERS)
    full = await answer(connect, max_memories=window, vector_reach=100)
    assert set(olds) <= set(full)
    best_first = sorted(olds, key=lambda c: -full[c]["cosine"])
    for far_limit, expect in ((1, 1), (2, 2), (3, 3), (50, 3)):
        got = await answer(
            connect, max_memories=window, vector_reach=100, vector_far_limit=far_limit
        )
        assert [c for c in best_first if c in got] == best_first[:expect]
        for c in best_first[:expect]:
            assert got[c] == full[c]  # never changes a score


async def test_raising_the_reach_never_removes_a_row(connect, store_backend):
    # An old row returned through FTS (gated on its rrf score) that the far list also ranks,
    # with a cosine below the gate: the far vote must not make it disappear (§19.2).
    old = "invoice 4471 paid late; parking, coffee, weather, holidays, travel, offsite, agenda"
    async with connect() as t:
        await t.store(old)
        await t.store_all([f"lunch menu item {i}" for i in range(110)])
    for settings in ({}, {"confidence_enabled": True}):
        async with connect(max_memories=100, **settings) as t:
            without = await t.contents("invoice reconciliation")
        async with connect(max_memories=100, vector_reach=1000, **settings) as t:
            with_reach = await t.contents("invoice reconciliation")
        assert old in without, settings
        assert set(without) <= set(with_reach), settings


async def test_each_table_has_its_own_window(connect):
    async with connect() as t:
        await t.episode("rollout strategy for kubernetes clusters")
        await t.store(X)
        await t.store_all(FILLERS)
    got = await answer(connect, max_memories=len(FILLERS))
    assert got["[Episode] " + X]["signal"] == "cosine"
    assert X not in got


async def test_the_window_is_counted_within_the_scope(connect):
    async with connect() as t:
        await t.store(X)
        await t.store_all(FILLERS, agent="bob")
    # Another agent's newer rows take no position in alice's window.
    assert X in await answer(connect, max_memories=1)
    async with connect() as t:
        await t.store_all(FILLERS, project_id="other")
        await t.store_all(FILLERS, channel="noise")
    # Without project and channel filters those rows are in scope and newer than X.
    assert X not in await answer(connect, max_memories=1)
    async with connect(max_memories=1) as t:
        assert X not in await t.contents(QUERY, deep=True, project_id="")  # "noise" rows
        assert X not in await t.contents(QUERY, deep=True, channel="main")  # "other" rows
        assert X in await t.contents(QUERY, deep=True, project_id="", channel="main")


async def test_the_window_holds_the_newest_rows_of_a_burst(connect):
    rows = [f"rollout strategy for kubernetes clusters, take {i}" for i in range(6)]
    async with connect() as t:
        await t.store_all(rows)  # written within a second or two: created_at ties
    got = await answer(connect, max_memories=2)
    assert {c for c in got if c in rows} == set(rows[-2:])


async def test_zero_window_leaves_fts_and_keyword_only(connect, store_backend):
    await _corpus(connect)
    got = await answer(connect, "kubernetes rollout", max_memories=0)
    assert got and all("cosine" not in r for r in got.values())


async def test_the_like_fallback_reads_at_most_the_window(connect):
    rows = [f"zq{i} marker row" for i in range(8)]
    async with connect() as t:
        await t.store_all(rows)
        await t.store_all([f"filler {i}" for i in range(100)])  # pool >= 100: unscored pass
    async with connect(max_memories=3, recall_mode="cascade") as t:
        assert await t.contents("zq", limit=10) == rows[-3:]  # the newest three, best last
    async with connect(recall_mode="cascade") as t:
        assert await t.contents("zq", limit=10) == rows


async def test_rows_of_a_foreign_width_take_a_position_and_are_skipped(connect):
    from cpersona.embedding.hashing import HashingProvider

    async with connect() as t:
        await t.store(X)
        await t.store("an older filler")
    async with connect() as t:
        await t.store("kubernetes rollout strategy notes")
        # Another writer's 64-wide vector (a 2.5.x server on another model): cpersona's own
        # writes never mix models in one table (embedding/routing.py), so it is planted.
        blob = HashingProvider(64).embed(["kubernetes rollout strategy notes"])[0].tobytes()
        with t.engine.db.atomic() as conn:
            conn.execute(
                "UPDATE memories SET embedding = ? WHERE content = ?",
                (embedding_param(conn, blob), "kubernetes rollout strategy notes"),
            )
    # The window holds the newest 2 rows: the 64-wide one (skipped) and the filler; X is out.
    got = await answer(connect, QUERY, max_memories=2)
    assert X not in got and "cosine" not in got.get("kubernetes rollout strategy notes", {})
    got = await answer(connect, QUERY, max_memories=3)
    assert got[X]["signal"] == "cosine"
