"""The seam between the channels and fusion (issue 31): a step in `Recaller.list_steps` sees
every ranked list of a recall, hydrated, and what it leaves is what fusion (or the cascade)
ranks, through a real MCP client on both stores."""

from __future__ import annotations

from dataclasses import replace

import pytest
from cpersona.retrieval.channel import RankedList
from cpersona.retrieval.hydration import Hydration
from cpersona.retrieval.recall_query import RecallQuery
from cpersona.retrieval.trace import Trace

pytestmark = pytest.mark.anyio

OLD = "kubernetes rollout strategy, the old plan"
NEW = "kubernetes rollout strategy, the new plan"
QUERY = "kubernetes rollout strategy"


@pytest.mark.parametrize("mode", ["rrf", "rsf", "cascade"])
async def test_a_list_step_sees_every_list_and_fusion_ranks_what_it_leaves(connect, mode):
    async with connect(recall_mode=mode) as t:
        await t.store(OLD)
        await t.store(NEW)
        assert {OLD, NEW} <= set(await t.contents(QUERY, deep=True))
        seen: list[str] = []

        def drop_old(
            query: RecallQuery, ranked: RankedList, reads: Hydration, trace: Trace
        ) -> RankedList:
            seen.append(ranked.name)
            return replace(ranked, rows=[r for r in ranked.rows if r.content != OLD])

        t.engine.recaller.list_steps = (drop_old,)
        got = await t.contents(QUERY, deep=True)
        assert NEW in got and OLD not in got
        # Every list the mode ranks passed the step: the vector arm's two, the episodes',
        # and the keyword list (the cascade ranks it last, for the places left).
        assert {"near", "far", "episodes", "keyword"} <= set(seen)
