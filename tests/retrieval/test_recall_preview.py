"""The preview tier, the full-content budget and get_contents (retrieval.md §14).

By default a message with a `ref` longer than CPERSONA_RECALL_PREVIEW_CHARS (500) is cut to a
pure prefix with `content_len` and `content_truncated`. `full_content=true` returns rows whole
while 200,000 characters last, spent from the last (best) message back; earlier rows then fall
back to the preview and `full_content_budget_chars` says so. get_contents expands `mem:` /
`ep:` refs of one agent, at most 20 per call, under a 40,000-character budget.
"""

from __future__ import annotations

import json

import pytest
from support.mcp_client import AGENT

pytestmark = pytest.mark.anyio


def long_text(tag: str, size: int) -> str:
    body = f"{tag} " + "budget ledger entry " * (size // 20 + 1)
    return body[: size - 1] + "."  # store strips outer whitespace: end on a full stop


async def test_preview_is_a_pure_prefix_of_rows_with_a_ref(connect):
    async with connect() as t:
        text = long_text("alpha", 1200)
        await t.store(text)
        await t.store("budget ledger entry short")
        await t.episode(long_text("episode", 900))
        await t.store_all([f"pool row {i}" for i in range(50)])  # the profile passes
        await t("update_profile", {"agent_id": AGENT, "profile": "p" * 1500})
        messages = await t.messages("budget ledger entry", deep=True, limit=50)
    by_ref = {m.get("ref", "profile"): m for m in messages}
    long_mem = next(m for m in messages if m["content"].startswith("alpha"))
    assert long_mem["content"] == text[:500]
    assert long_mem["content_len"] == 1200 and long_mem["content_truncated"] is True
    assert list(long_mem)[-2:] == ["content_len", "content_truncated"]
    short = next(m for m in messages if m["content"] == "budget ledger entry short")
    assert "content_len" not in short and "content_truncated" not in short
    episode = next(m for m in messages if m.get("ref", "").startswith("ep:"))
    full_episode = "[Episode] " + long_text("episode", 900)
    assert episode["content"] == full_episode[:500]
    assert episode["content_len"] == len(full_episode)
    assert by_ref["profile"]["content"] == "[Profile] " + "p" * 1500  # no ref: never cut
    assert "content_truncated" not in by_ref["profile"]


@pytest.mark.parametrize("cap", [1, 100, 1199, 1200, 0, -5])
async def test_preview_cap_setting(connect, cap):
    text = long_text("alpha", 1200)
    async with connect() as t:
        await t.store(text)
    async with connect(recall_preview_chars=cap) as t:
        (m,) = await t.messages(text)
    if 0 < cap < 1200:
        assert m["content"] == text[:cap] and m["content_len"] == 1200
    else:
        assert m["content"] == text and "content_truncated" not in m


async def _budget_corpus(connect, sizes: list[int], **settings) -> None:
    async with connect(**settings) as t:
        for i, size in enumerate(sizes):
            await t.store(long_text(f"row{i:02d}", size))


async def test_full_content_budget_spent_from_the_last_message(connect):
    await _budget_corpus(connect, [15_000] * 15)
    async with connect() as t:
        out = await t.recall("budget ledger entry", deep=True, limit=20, full_content=True)
        whole = await t.recall("budget ledger entry", deep=True, limit=20)
    messages = out["messages"]
    assert len(messages) == 15
    assert out["full_content_budget_chars"] == 200_000
    # 13 * 15,000 = 195,000 fit; the 14th would pass 200,000: it and every earlier row preview.
    assert all(len(m["content"]) == 15_000 and "content_truncated" not in m for m in messages[-13:])
    for m in messages[:2]:
        assert len(m["content"]) == 500 and m["content_len"] == 15_000
    assert "full_content_budget_chars" not in whole
    assert [m["ref"] for m in whole["messages"]] == [m["ref"] for m in messages]
    assert all(len(m["content"]) == 500 for m in whole["messages"])


async def test_full_content_within_the_budget_adds_no_key(connect):
    # 10 * 15,000 + 2 * 25,000 = 200,000 exactly: everything whole.
    await _budget_corpus(connect, [15_000] * 10 + [25_000] * 2, max_content_length=30_000)
    async with connect() as t:
        out = await t.recall("budget ledger entry", deep=True, limit=20, full_content=True)
    assert set(out) == {"messages"}
    assert sum(len(m["content"]) for m in out["messages"]) == 200_000


async def test_the_last_message_is_always_whole(connect):
    await _budget_corpus(connect, [250_000, 400], max_content_length=300_000)
    async with connect() as t:
        out = await t.recall("budget ledger entry", deep=True, full_content=True)
    sizes = {m["content"][:5]: (len(m["content"]), m.get("content_len")) for m in out["messages"]}
    last = out["messages"][-1]
    assert len(last["content"]) in (250_000, 400) and "content_truncated" not in last
    # The earlier row would pass 200,000: the budget ran out (and says so) even when that row
    # is short enough to need no cut.
    assert out["full_content_budget_chars"] == 200_000
    if len(last["content"]) == 400:
        assert sizes["row00"] == (500, 250_000)
    else:
        assert sizes["row01"] == (400, None)


async def test_full_content_with_preview_disabled_returns_everything(connect):
    await _budget_corpus(connect, [15_000] * 15)
    async with connect(recall_preview_chars=0) as t:
        out = await t.recall("budget ledger entry", deep=True, limit=20, full_content=True)
    assert set(out) == {"messages"}
    assert all(len(m["content"]) == 15_000 for m in out["messages"])


async def test_budget_counts_conversation_turns_but_never_cuts_them(connect):
    await _budget_corpus(connect, [15_000] * 3)
    async with connect() as t:
        turns = [
            {
                "role": "user",
                "content": long_text(f"turn{i}", 15_000),
                "timestamp": "2999-01-01T00:00:00Z",
            }
            for i in range(13)
        ]
        out = await t(
            "recall_with_context",
            {
                "agent_id": AGENT,
                "query": "budget ledger entry",
                "deep": True,
                "external_context": turns,
                "full_content": True,
            },
        )
    messages = out["messages"]
    assert out["full_content_budget_chars"] == 200_000
    assert all("context_type" in m and len(m["content"]) == 15_000 for m in messages[-13:])
    # 13 turns (195,000) are admitted from the newest end; the recalled rows are earlier.
    assert [len(m["content"]) for m in messages[:3]] == [500, 500, 500]


# -- get_contents ---------------------------------------------------------------------------


async def test_get_contents_items_and_missing(tools):
    text = long_text("alpha", 1200)
    mem = await tools.store(
        text,
        id="m-9",
        timestamp="2026-03-01T00:00:00Z",
        source={"type": "User", "id": "u1", "name": "Ann"},
        project_id="p1",
        channel="c1",
    )
    ep = await tools.episode(
        "retro summary", resolved=True, history=[{"timestamp": "2026-02-01T00:00:00Z"}]
    )
    foreign = await tools.store("bob's row", agent="bob")
    # Someone else's row, ids no row has, other kinds and malformed refs: all missing.
    missing = [
        f"mem:{foreign}",
        "mem:99999",
        "doc:1",
        "mem:abc",
        "mem:0",
        "mem:-1",
        "nonsense",
        f"ep:{mem + 500}",
    ]
    refs = [f"mem:{mem}", f"ep:{ep}", *missing, f"mem: {mem}"]
    out = await tools("get_contents", {"agent_id": AGENT, "refs": refs})
    assert set(out) == {"items", "missing", "count"}
    memory = {
        "content": text,
        "source": {"type": "User", "id": "u1", "name": "Ann"},
        "timestamp": "2026-03-01T00:00:00Z",
        "id": "m-9",
    }
    assert out["items"] == [
        {"ref": f"mem:{mem}", **memory},
        {
            "ref": f"ep:{ep}",
            "content": "[Episode] retro summary",
            "source": {"System": "episode"},
            "timestamp": "2026-02-01T00:00:00Z",
            "resolved": True,
        },
        {"ref": f"mem: {mem}", **memory},  # a space after the colon still names the row
    ]
    assert out["missing"] == missing
    assert out["count"] == 3


async def test_get_contents_expands_a_recalled_preview(tools):
    text = long_text("alpha", 1200)
    await tools.store(text)
    (m,) = await tools.messages(text)
    assert m["content_truncated"] is True
    out = await tools("get_contents", {"agent_id": AGENT, "refs": [m["ref"]]})
    assert out["items"][0]["content"] == text


async def test_get_contents_refusals(tools):
    mem = await tools.store("short row")
    assert await tools("get_contents", {"agent_id": "", "refs": [f"mem:{mem}"]}) == {
        "ok": False,
        "error": "agent_id is required",
    }
    empty = await tools("get_contents", {"agent_id": AGENT, "refs": []})
    assert empty["ok"] is False and empty["error"]
    twenty = await tools("get_contents", {"agent_id": AGENT, "refs": [f"mem:{mem}"] * 20})
    assert twenty["count"] == 20
    over = await tools.raw("get_contents", {"agent_id": AGENT, "refs": [f"mem:{mem}"] * 21})
    assert over.is_error  # the published schema's maxItems: 20


def cost(item: dict) -> int:
    return sum(
        len(v) if isinstance(v, str) else len(json.dumps(v, ensure_ascii=False))
        for v in item.values()
    )


@pytest.mark.parametrize("extra", [0, 1])
async def test_get_contents_budget_defers_the_rest(connect, extra):
    async with connect(max_content_length=50_000) as t:
        first = await t.store(long_text("first", 15_000))
        probe = await t("get_contents", {"agent_id": AGENT, "refs": [f"mem:{first}"]})
        spent = cost(probe["items"][0])
        ref_and_stamp = spent - 15_000
        # The second item fills the 40,000 budget exactly (extra=0) or by one more character.
        second = await t.store(long_text("second", 40_000 - spent - ref_and_stamp + extra))
        third = await t.store(long_text("third", 10))
        refs = [f"mem:{first}", f"mem:{second}", "mem:99999", f"mem:{third}"]
        out = await t("get_contents", {"agent_id": AGENT, "refs": refs})
    if extra == 0:
        assert [i["ref"] for i in out["items"]] == [refs[0], refs[1]]
        assert out["missing"] == ["mem:99999"] and out["deferred"] == refs[3:]
        assert sum(cost(i) for i in out["items"]) == 40_000
    if extra == 1:
        assert [i["ref"] for i in out["items"]] == [refs[0]]
        assert out["deferred"] == refs[1:]  # this one and every later ref, unresolved
        assert out["missing"] == []
    assert out["budget_chars"] == 40_000 and out["count"] == len(out["items"])


async def test_get_contents_first_item_is_always_admitted(connect):
    async with connect(max_content_length=50_000) as t:
        big = await t.store(long_text("big", 45_000))
        small = await t.store("tiny")
        out = await t("get_contents", {"agent_id": AGENT, "refs": [f"mem:{big}", f"mem:{small}"]})
        alone = await t("get_contents", {"agent_id": AGENT, "refs": [f"mem:{big}"]})
    assert [len(i["content"]) for i in out["items"]] == [45_000]
    assert out["deferred"] == [f"mem:{small}"]
    assert set(alone) == {"items", "missing", "count"}
