"""Contract 9: lock_memory protects a row; it never boosts it.

A locked row ranks exactly as it did unlocked: same rows, same order, same match_reason, in
every fusion mode and under confidence. Spec: contracts §9.
"""

from __future__ import annotations

import pytest
from support.mcp_client import AGENT

pytestmark = pytest.mark.anyio

CORPUS = [
    "the deploy pipeline runs on friday",
    "deploy keys rotate every month",
    "staging deploy needs manual approval",
    "the release train leaves on friday afternoon",
    "friday standup moved to ten",
]
QUERIES = ["deploy pipeline friday", "staging deploy", "friday", "release train"]


@pytest.mark.parametrize(
    "settings",
    [{}, {"recall_mode": "rsf"}, {"recall_mode": "cascade"}, {"confidence_enabled": True}],
    ids=["rrf", "rsf", "cascade", "confidence"],
)
async def test_a_locked_row_ranks_exactly_as_unlocked(connect, settings):
    async with connect(**settings) as t:
        ids = await t.store_all(CORPUS)
        # deep: no recall-count bookkeeping, so repeated recalls are comparable.
        before = [await t.messages(q, deep=True) for q in QUERIES]
        returned = [int(m["ref"][4:]) for ms in before for m in ms]
        chosen = list(dict.fromkeys(returned))[:2]  # rows the queries return
        assert chosen and set(chosen) <= set(ids)
        for memory_id in chosen:
            locked = await t("lock_memory", {"memory_id": memory_id, "agent_id": AGENT})
            assert locked == {"ok": True, "locked_id": memory_id}
        after = [await t.messages(q, deep=True) for q in QUERIES]
        refused = await t(
            "update_memory", {"memory_id": chosen[0], "content": "x", "agent_id": AGENT}
        )
        await t("unlock_memory", {"memory_id": chosen[0], "agent_id": AGENT})
        unlocked = [await t.messages(q, deep=True) for q in QUERIES]
    assert refused["ok"] is False
    for b, a, u in zip(before, after, unlocked, strict=True):
        for m in (*b, *a, *u):
            m.get("confidence", {}).pop("age_hours", None)  # the clock moves between calls
        assert a == b == u
