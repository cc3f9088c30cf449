"""Contract 7: the profile row is unscored and needs a pool of 50 rows.

Below 50 rows (memories + episodes in the call's scope) it is dropped whatever the
confidence setting; above it, with confidence off, it sits at the weak end (the FIRST message
under rrf / rsf) and is cut when scored rows fill the limit; with confidence on it is scored
and carries match_reason. Spec: retrieval.md §8, §7.3, §18.1-3.
"""

from __future__ import annotations

import pytest
from support.mcp_client import AGENT

pytestmark = pytest.mark.anyio

PROFILE = "[Profile] prefers metric units"
PROFILE_MESSAGE = {"content": PROFILE, "source": {"System": "profile"}}


async def _pool(t, memories: int, episodes: int = 0, agent: str = AGENT, **kw) -> None:
    tag = "".join(f" {v}" for v in kw.values())
    await t.store_all([f"pool row {i} of {agent}{tag}" for i in range(memories)], agent=agent, **kw)
    for i in range(episodes):
        await t.episode(f"pool episode {i}", agent=agent, **kw)


async def _profile(t, text: str = "prefers metric units", agent: str = AGENT) -> None:
    out = await t("update_profile", {"agent_id": agent, "profile": text})
    assert out["ok"] is True


@pytest.mark.parametrize("confidence", [False, True])
async def test_absent_below_fifty_present_at_fifty(connect, confidence):
    async with connect(confidence_enabled=confidence) as t:
        await _profile(t)
        await _pool(t, 48, episodes=1)
        # 49 rows; a query no stored row answers: nothing for limit to cut.
        assert await t.messages("zebra crossing") == []
        await t.episode("the fiftieth row is an episode")
        got = await t.messages("zebra crossing")
    assert [m["content"] for m in got] == [PROFILE]
    if confidence:
        assert got[0]["match_reason"]["signal"] == "confidence"
        assert got[0]["confidence"]["age_unknown"] is True
    else:
        assert got[0] == PROFILE_MESSAGE  # no ref, no timestamp, no match_reason


async def test_the_pool_is_counted_within_the_scope(connect):
    async with connect(confidence_enabled=True) as t:
        await _profile(t)
        await _pool(t, 30)
        await _pool(t, 30, agent="bob")
        await _pool(t, 30, project_id="p2")
        assert await t.contents("zebra crossing") == [PROFILE]  # 60 rows agent-wide
        assert await t.contents("zebra crossing", project_id="") == []  # 30 in the global pool
        assert await t.contents("zebra crossing", project_id="p2") == [PROFILE]  # 30 + 30
        assert await t.contents("zebra crossing", agent="bob") == []  # bob has no profile


@pytest.mark.parametrize("mode", ["rrf", "rsf"])
async def test_confidence_off_profile_is_first_and_cut_by_a_full_limit(connect, mode):
    async with connect(recall_mode=mode) as t:
        await _profile(t)
        await _pool(t, 60)
        got = await t.messages("pool row", deep=True, limit=100)
        assert len(got) > 3
        assert got[0] == PROFILE_MESSAGE
        assert all("match_reason" in m for m in got[1:])
        full = await t.contents("pool row", deep=True, limit=3)
    assert len(full) == 3 and PROFILE not in full


async def test_confidence_on_profile_ranks_high_and_survives_the_limit(connect):
    async with connect(confidence_enabled=True) as t:
        await _profile(t)
        await _pool(t, 60)
        got = await t.messages("pool row", limit=3)
    assert PROFILE in [m["content"] for m in got]
    (profile,) = [m for m in got if m["content"] == PROFILE]
    assert profile["match_reason"] == {
        "signal": "confidence",
        "score": profile["confidence"]["score"],
    }


async def test_cascade_places_the_profile_before_the_keyword_fill(connect):
    async with connect(recall_mode="cascade", autocut_enabled=False) as t:
        await _profile(t)
        await _pool(t, 120)  # >= 100 rows: unscored keyword rows pass the gate
        await t.store("the schedule")
        await t.store(
            "Quarterly digest: we rotated credentials, refreshed pins, reviewed "
            "firewall rules, archived accounts and agreed the release schedule"
        )
        got = await t.messages("schedule", limit=30)
    contents = [m["content"] for m in got]
    # Worst first: the keyword-fill row (no match_reason), the profile, the vector row.
    assert contents[-2:] == [PROFILE, "the schedule"]
    assert got[-1]["match_reason"]["signal"] == "cosine"
    assert contents[0].startswith("Quarterly digest") and "match_reason" not in got[0]


async def test_one_profile_row_per_agent(connect):
    async with connect() as t:
        await _profile(t, "first text")
        await _profile(t, "second text")
        await _pool(t, 60)
        got = await t.contents("zebra crossing")
    assert got == ["[Profile] second text"]


async def test_blank_query_lists_the_profile_and_the_newest_rows(connect):
    async with connect() as t:
        await _profile(t)
        await _pool(t, 60)
        got = await t.contents("   ", limit=5)
    # Cascade's pure recency: the profile, then the newest four memories (newest first);
    # reversed, the profile is the last message.
    assert got == [f"pool row {i} of {AGENT}" for i in (56, 57, 58, 59)] + [PROFILE]
