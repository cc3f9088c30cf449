"""Recall arguments: isolation axes, source_id, exclusions, limits and argument parsing.

Spec: retrieval.md §2.1 (arguments, schema bounds, lenient types), §4.0 (scope predicate,
episode source rule), §4.10 (exclude_contents, rank positions under rrf).
"""

from __future__ import annotations

import pytest
from support.mcp_client import AGENT

pytestmark = pytest.mark.anyio


async def _scoped_corpus(t) -> None:
    await t.store("ledger row global", project_id="", channel="")
    await t.store("ledger row p1", project_id="p1")
    await t.store("ledger row p2", project_id="p2")
    await t.store("ledger row c1", channel="c1")
    await t.store("ledger row c2", channel="c2")
    await t.store("ledger row of bob", agent="bob")
    await t.store("ledger row of the empty agent", agent="")


async def seen(t, agent: str = AGENT, **kw) -> set[str]:
    return set(await t.contents("ledger row", agent, deep=True, **kw))


async def test_isolation_axes(tools):
    await _scoped_corpus(tools)
    mine = {"ledger row global", "ledger row p1", "ledger row p2", "ledger row c1", "ledger row c2"}
    assert await seen(tools) == mine  # project absent: no project filter
    assert await seen(tools, project_id="") == mine - {"ledger row p1", "ledger row p2"}
    assert await seen(tools, project_id="p1") == mine - {"ledger row p2"}
    assert await seen(tools, channel="c1") == mine - {"ledger row c2"}
    assert await seen(tools, project_id="p1", channel="c2") == {
        "ledger row global",
        "ledger row p1",
        "ledger row c2",
    }
    assert await seen(tools, "bob") == {"ledger row of bob"}
    assert await seen(tools, "") == {"ledger row of the empty agent"}  # a real bucket
    assert await seen(tools, "carol") == set()


async def test_auto_project_is_echoed(tools):
    await _scoped_corpus(tools)
    out = await tools.recall("ledger row", deep=True, project_id="@auto")
    assert out["resolved_project_id"] == "@auto"


async def test_source_id_prefix_and_the_episode_source_rule(tools):
    await tools.store("ledger from discord", source={"type": "User", "id": "discord:42"})
    await tools.store("ledger from slack", source={"type": "User", "id": "slack:42"})
    await tools.store("ledger with a numeric id", source={"type": "User", "id": 4242})
    await tools.store("ledger without a source")
    await tools.episode("ledger episode")
    everything = set(await tools.contents("ledger", deep=True))
    assert "[Episode] ledger episode" in everything and len(everything) == 5
    assert set(await tools.contents("ledger", deep=True, source_id="discord:")) == {
        "ledger from discord"
    }
    assert set(await tools.contents("ledger", deep=True, source_id="Discord:")) == set()
    assert set(await tools.contents("ledger", deep=True, source_id="42")) == {
        "ledger with a numeric id"
    }
    # With a channel, episodes are admitted again (scoped by channel).
    with_channel = set(await tools.contents("ledger", deep=True, source_id="slack", channel="c9"))
    assert with_channel == {"ledger from slack", "[Episode] ledger episode"}


async def test_exclude_contents(tools):
    long_row = "The migration plan: move the billing tables first, then the ledger, then audit"
    await tools.store_all(["ledger row one", "ledger row two", long_row])
    await tools.episode("ledger row one")
    base = await tools.contents("ledger row one", deep=True)
    assert "ledger row one" in base and "[Episode] ledger row one" in base
    out = await tools.contents(
        "ledger row one", deep=True, exclude_contents=["  LEDGER ROW ONE ", "", "ledger row"]
    )
    # Exact below 32 characters ("ledger row" excludes nothing); memories and the episode's
    # vector row compare their own text, so the episode stays.
    assert "ledger row one" not in out and "ledger row two" in out
    assert "[Episode] ledger row one" in out
    gone = await tools.contents(
        "migration plan billing ledger",
        deep=True,
        exclude_contents=[long_row[:40] + " and more words after it"],
    )
    assert long_row in gone  # neither is a prefix of the other
    gone = await tools.contents(
        "migration plan billing ledger", deep=True, exclude_contents=[long_row[:35]]
    )
    assert long_row not in gone
    gone = await tools.contents(
        "migration plan billing ledger",
        deep=True,
        exclude_contents=[long_row + " plus the tail of a longer echo"],
    )
    assert long_row not in gone


async def test_excluded_rows_keep_their_rank_positions_under_rrf(connect):
    async with connect() as t:
        await t.store_all(["ledger row one", "ledger row two", "ledger row three"])
        base = {
            m["content"]: m["match_reason"] for m in await t.messages("ledger row one", deep=True)
        }
        out = {
            m["content"]: m["match_reason"]
            for m in await t.messages(
                "ledger row one", deep=True, exclude_contents=["ledger row one"]
            )
        }
    assert "ledger row one" not in out
    for content, reason in out.items():
        assert reason["rrf"] == base[content]["rrf"]


async def test_excluded_rows_leave_rsf_normalisation(connect):
    async with connect(recall_mode="rsf") as t:
        await t.store_all(["ledger row one", "ledger row two", "ledger row three"])
        out = await t.messages("ledger row one", deep=True, exclude_contents=["ledger row one"])
    assert out[-1]["match_reason"]["rsf"] == 1.0  # the best remaining row is the new max


async def test_limit_bounds_and_lenient_types(tools):
    await tools.store_all([f"ledger row {i}" for i in range(15)])
    for bad in (101, -1):
        result = await tools.raw("recall", {"agent_id": AGENT, "query": "ledger", "limit": bad})
        assert result.is_error
    hundred = await tools.recall("ledger row", limit=100, deep=True)
    assert len(hundred["messages"]) == 15
    # A present argument of the wrong JSON type is refused by the schema...
    result = await tools.raw("recall", {"agent_id": AGENT, "query": "ledger", "limit": "5"})
    assert result.is_error
    # ...and a missing one takes its default (limit 10).
    assert len(await tools.messages("ledger row", deep=True)) == 10
