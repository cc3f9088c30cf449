"""Contract 1: recall answers worst first; the LAST message is the best match.

Spec: retrieval.md §10 (cut, reverse), §3.3 (match_reason), §5 (fusion scores).
"""

from __future__ import annotations

import itertools

import pytest
from recall_support import scores

pytestmark = pytest.mark.anyio

CORPUS = [
    "the deploy pipeline runs on friday",
    "deploy keys rotate every month",
    "friday standup moved to ten",
    "the pipeline cache lives in the bucket",
    "lunch order is ramen on friday",
    "database backups run nightly",
    "staging deploy needs manual approval",
    "the release train leaves on friday afternoon",
]
EXACT = CORPUS[0]


def ascending(values: list[float]) -> bool:
    return all(a <= b for a, b in itertools.pairwise(values))


@pytest.mark.parametrize(
    ("overrides", "key"),
    [
        ({"recall_mode": "rrf"}, "rrf"),
        ({"recall_mode": "rsf"}, "rsf"),
        ({"recall_mode": "cascade", "autocut_enabled": False}, "cosine"),
        ({"recall_mode": "rrf", "confidence_enabled": True, "autocut_enabled": False}, "score"),
        ({"recall_mode": "rsf", "confidence_enabled": True, "autocut_enabled": False}, "score"),
    ],
)
async def test_scores_ascend_and_the_exact_match_is_last(connect, overrides, key, store_backend):
    async with connect(**overrides) as t:
        await t.store_all(CORPUS)
        messages = await t.messages(EXACT, deep=True)
    assert len(messages) >= 2
    assert messages[-1]["content"] == EXACT
    ranking = [m["match_reason"][key] for m in messages]
    assert ascending(ranking), ranking
    assert ranking[-1] == max(ranking) and ranking[-1] > ranking[0]
    if overrides.get("confidence_enabled"):
        assert {m["match_reason"]["signal"] for m in messages} == {"confidence"}
        assert scores(messages) == [m["confidence"]["score"] for m in messages]


async def test_limit_cuts_the_weak_end(tools):
    await tools.store_all(CORPUS)
    full = await tools.messages(EXACT, deep=True)
    one = await tools.messages(EXACT, deep=True, limit=1)
    assert [m["content"] for m in one] == [EXACT] == [full[-1]["content"]]
    assert await tools.messages(EXACT, deep=True, limit=0) == []
    two = await tools.messages(EXACT, deep=True, limit=2)
    assert len(two) == 2 and two[-1]["content"] == EXACT


async def test_response_keys_on_success(tools):
    ids = await tools.store_all(CORPUS[:3])
    out = await tools.recall("deploy pipeline friday", deep=True)
    assert set(out) == {"messages"}
    for m in out["messages"]:
        assert m["ref"].startswith("mem:") and int(m["ref"][4:]) in ids
        # A memory stored without a source keeps the stored "{}": `source` is present.
        assert list(m) == ["content", "ref", "source", "timestamp", "match_reason"]
        assert m["source"] == {}
        assert m["match_reason"]["signal"] in ("cosine", "rrf")


async def test_message_fields_in_order(tools):
    await tools.store(
        "deploy pipeline friday",
        id="m-1",
        timestamp="2026-03-01T09:00:00+09:00",
        source={"type": "User", "id": "u1", "name": "Ann"},
    )
    await tools.episode("deploy pipeline retro", history=[{"timestamp": "2026-03-02T00:00:00Z"}])
    messages = await tools.messages("deploy pipeline friday", deep=True)
    by_kind = {m["ref"][:3]: m for m in messages}
    assert list(by_kind["mem"]) == ["content", "ref", "source", "timestamp", "id", "match_reason"]
    assert by_kind["mem"]["source"] == {"type": "User", "id": "u1", "name": "Ann"}
    assert by_kind["mem"]["timestamp"] == "2026-03-01T09:00:00+09:00"
    assert by_kind["mem"]["id"] == "m-1"
    assert list(by_kind["ep:"]) == ["content", "ref", "source", "timestamp", "match_reason"]
    assert by_kind["ep:"]["source"] == {"System": "episode"}
    assert by_kind["ep:"]["timestamp"] == "2026-03-02T00:00:00Z"
    assert by_kind["ep:"]["content"] == "[Episode] deploy pipeline retro"
