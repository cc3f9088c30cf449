"""Episodes inform a fused recall instead of burying its memories (issue 30).

Three deliberate differences from 2.5.x (docs/compatibility.md, "Episodes in recall"), observed
through the tools on every backend:

- the gate judges a row's cosine / rrf / rsf before the episode-boundary penalty, so an old
  memory that matches is not gated away because an episode was archived after it (the penalty
  still scales its scores, which `match_reason` shows);
- a fused answer holds at most CPERSONA_RECALL_EPISODE_ROWS episode rows (default: one per ten
  rows asked), and they come after its memories (so, reversed, before them in `messages`);
- an episode row gives way to the memory it ties with.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from recall_support import IDENT, LEXICAL, hours_before

pytestmark = pytest.mark.anyio

KAYAK = [f"kayak trip note {i}: paddled the river with the kayak club" for i in range(14)]
KAYAK_EPISODES = [f"kayak club session {i}: the kayak trip and the river" for i in range(4)]


async def _kayak_store(t) -> None:
    stamp = hours_before(datetime.now(UTC), 24 * 30)
    for text in KAYAK:
        await t.store(text, timestamp=stamp)
    for summary in KAYAK_EPISODES:
        await t.episode(summary, keywords="kayak river")


def _kinds(messages: list[dict]) -> list[str]:
    return [m["ref"].split(":")[0] if "ref" in m else "profile" for m in messages]


@pytest.mark.parametrize("mode", ["rrf", "rsf"])
async def test_an_old_keyword_match_survives_a_newer_episode(connect, mode):
    # LEXICAL is found by the lexical channels only (recall_support). Stamped 30 days before
    # the episode, its fused score is halved; gated after the penalty it fell under the gate
    # (deep halves the gate of this two-row pool: 1/61 passes it, 1/122 did not).
    async with (
        connect(recall_mode=mode) as on,
        connect(recall_mode=mode, episode_penalty_enabled=False) as off,
    ):
        await on.store(LEXICAL, timestamp=hours_before(datetime.now(UTC), 24 * 30))
        await on.episode("weekly standup notes")
        penalised = {m["content"]: m for m in await on.messages(IDENT, deep=True)}
        plain = {m["content"]: m for m in await off.messages(IDENT, deep=True)}
    assert LEXICAL in penalised
    reason, unpenalised = penalised[LEXICAL]["match_reason"], plain[LEXICAL]["match_reason"]
    assert reason[mode] == pytest.approx(unpenalised[mode] * 0.5, rel=1e-12)


@pytest.mark.parametrize(
    ("setting", "limit", "episodes"), [(-1, 10, 1), (-1, 12, 2), (0, 10, 0), (3, 10, 3)]
)
async def test_episodes_take_their_allowance_after_the_memories(connect, setting, limit, episodes):
    async with connect(recall_episode_rows=setting) as t:
        await _kayak_store(t)
        messages = await t.messages("kayak trip river", limit=limit, deep=True)
    kinds = _kinds(messages)
    assert len(messages) == limit  # an episode past the allowance gives its place to a memory
    assert kinds.count("ep") == episodes
    # Worst first: the episodes, then the memories, the best memory last.
    assert kinds == ["ep"] * episodes + ["mem"] * (limit - episodes)


async def test_without_episodes_the_answer_is_unchanged(connect):
    async with connect(recall_episode_rows=0) as capped, connect() as default:
        for text in KAYAK:
            await default.store(text)
        assert await capped.messages("kayak trip river") == await default.messages(
            "kayak trip river"
        )


async def test_cascade_and_confidence_keep_their_own_order(connect):
    # The placement is fusion's: cascade keeps its stage order, confidence its score order
    # (contracts), so both still rank an episode wherever their rules put it.
    async with (
        connect(recall_mode="cascade") as cascade,
        connect(confidence_enabled=True, autocut_enabled=False) as confident,
    ):
        await _kayak_store(cascade)
        cascaded = _kinds(await cascade.messages("kayak trip river", limit=10))
        scored = await confident.messages("kayak trip river", limit=10)
    assert cascaded.count("ep") > 1
    confidences = [m["confidence"]["score"] for m in scored]
    assert confidences == sorted(confidences)
