"""recall_with_context: the caller's turns merged with recalled rows by instant (contract 1).

Chronology compares the instants stamps name, whatever their offset (naive = UTC) and
whichever side of the merge wrote them; messages with no usable instant (missing, empty,
unparseable, or outside the representable range) come first in merge order, so the last
message is the truly newest. Rows repeating a turn are left out. Spec: retrieval.md §16, §3.4,
§19.3.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from recall_support import AGENT, IDENT, LEXICAL

pytestmark = pytest.mark.anyio


def instant(stamp: str) -> datetime:
    t = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    return t if t.tzinfo else t.replace(tzinfo=UTC)


# Recalled rows and turns interleave in time only when offsets are honoured.
MEMORIES = [
    ("standup note one", "2026-03-01T09:00:00+09:00"),  # 00:00Z
    ("standup note two", "2026-02-28T19:30:00-05:00"),  # 00:30Z
    ("standup note three", "2026-03-01T00:15:00Z"),  # 00:15Z
    ("standup note four", "2026-03-01 00:45:00"),  # naive: 00:45Z
    ("standup note five", "2026-03-01T01:20:00.250+00:00"),  # 01:20:00.25Z
    ("standup note undated", "last tuesday"),
    ("standup note ancient", "0001-01-01T00:00:00+14:00"),  # before year 1 in UTC
]
TURNS = [
    {"role": "user", "content": "when is standup?", "timestamp": "2026-03-01T10:10:00+09:00"},
    {"role": "assistant", "content": "at ten", "timestamp": "2026-02-28T20:05:00-05:00"},
    {"role": "user", "content": "thanks", "timestamp": "2026-03-01T00:20:00Z"},
    {"role": "user", "content": "and friday?", "timestamp": "2026-03-01 01:20:00"},
    {"role": "assistant", "content": "same time"},
    {"role": "user", "content": "ok", "timestamp": ""},
    {"role": "user", "content": "bad stamp", "timestamp": "9999-12-31T23:59:59-14:00"},
]


def said(content: str, source: dict, timestamp: str = "") -> dict:
    """A caller's turn as the merge answers it."""
    return {
        "content": content,
        "source": source,
        "timestamp": timestamp,
        "context_type": "conversation",
    }


def user(user_id: str, name: str) -> dict:
    """The source the merge gives a user's turn."""
    return {"type": "User", "id": f"discord:{user_id}", "name": name}


async def merged(t, turns, query: str = "standup note", **kw) -> dict:
    out = await t(
        "recall_with_context",
        {
            "agent_id": AGENT,
            "query": query,
            "external_context": turns,
            "deep": True,
            "limit": 20,
            **kw,
        },
    )
    assert "ok" not in out, out
    return out


async def test_chronology_across_offsets_with_undated_first(tools):
    for content, stamp in MEMORIES:
        await tools.store(content, timestamp=stamp)
    out = await merged(tools, TURNS)
    messages = out["messages"]
    assert len(messages) == len(MEMORIES) + len(TURNS)
    undated = [
        m
        for m in messages
        if m["timestamp"] in ("", "last tuesday") or m["timestamp"].startswith(("0001-", "9999-"))
    ]
    n = len(undated)
    assert messages[:n] == undated
    # Merge order among undated: recalled rows (worst first) before the turns, turns as given.
    kinds = ["conversation" if "context_type" in m else "recalled" for m in undated]
    assert kinds == sorted(kinds, key=lambda k: k == "conversation")
    assert [m["content"] for m in undated if "context_type" in m] == [
        "same time",
        "ok",
        "bad stamp",
    ]
    dated = [instant(m["timestamp"]) for m in messages[n:]]
    assert dated == sorted(dated)
    assert [m["content"] for m in messages[n:]] == [
        "standup note one",
        "standup note three",
        "thanks",
        "standup note two",
        "standup note four",
        "at ten",
        "when is standup?",
        "and friday?",
        "standup note five",
    ]


async def test_equal_instants_keep_merge_order(tools):
    await tools.store("standup note a", timestamp="2026-03-01T09:00:00+09:00")
    out = await merged(
        tools,
        [
            {"role": "user", "content": "first said", "timestamp": "2026-03-01T00:00:00Z"},
            {"role": "user", "content": "second said", "timestamp": "2026-02-28T19:00:00-05:00"},
        ],
    )
    assert [m["content"] for m in out["messages"]] == [
        "standup note a",
        "first said",
        "second said",
    ]


async def test_conversation_message_shapes(tools):
    out = await merged(
        tools,
        [
            {"role": "assistant", "content": "  sure  ", "timestamp": "2026-03-01T00:00:00Z"},
            {"role": "user", "content": "hi", "name": "Ann", "user_id": "u7"},
            {"role": "user", "content": "yo", "name": "Bo"},
            {"role": "user", "content": "hey", "extra": {"kept": "out"}},
        ],
        query="zebra crossing",
    )
    assert out == {
        "messages": [
            said("hi", user("u7", "Ann")),
            said("yo", user("Bo", "Bo")),
            said("hey", user("User", "User")),
            said("sure", {"type": "Agent", "id": "self"}, "2026-03-01T00:00:00Z"),
        ]
    }


async def test_rows_repeating_a_turn_are_excluded(tools):
    long_row = "The migration plan: move the billing tables first, then the ledger, then audit"
    await tools.store_all(["standup at ten", "Standup at ten sharp", long_row, "standup moved"])
    out = await merged(
        tools,
        [
            {"role": "user", "content": "  STANDUP AT TEN  "},  # exact (short) match
            {"role": "system", "content": long_row[:40].upper()},  # prefix of a long row, any role
            {"role": "assistant", "content": "standup"},  # short: exact only, excludes nothing
        ],
        query="standup at ten migration plan billing",
    )
    recalled = [m["content"] for m in out["messages"] if "ref" in m]
    assert "standup at ten" not in recalled and long_row not in recalled
    assert "Standup at ten sharp" in recalled and "standup moved" in recalled


async def test_context_filter_only_lists_other_roles(tools):
    out = await merged(
        tools,
        [
            {"role": "system", "content": "be brief"},
            {"role": "tool", "content": "result 42"},
            {"content": "no role"},
            {"role": "system", "content": "   "},  # no content: neither merged nor listed
            {"role": "user", "content": "hello"},
        ],
        query="zebra crossing",
    )
    assert [m["content"] for m in out["messages"]] == ["hello"]
    info = out["context_filter_only"]
    assert set(info) == {"roles", "note"} and isinstance(info["note"], str) and info["note"]
    assert info["roles"] == ["(unset)", "system", "tool"]
    plain = await merged(tools, [{"role": "user", "content": "hello"}], query="zebra crossing")
    assert set(plain) == {"messages"}


async def test_context_field_issues_shapes(tools):
    merged_only = await merged(
        tools,
        [
            {"role": "user", "content": "hi", "name": 3, "timestamp": 17},
            {"role": "user", "content": "fine"},
        ],
        query="zebra crossing",
    )
    issues = merged_only["context_field_issues"]
    assert issues["entries"] == [{"index": 0, "fields": ["name", "timestamp"]}]
    assert [m["content"] for m in merged_only["messages"]] == ["hi", "fine"]
    hi = merged_only["messages"][0]
    assert hi["source"]["name"] == "User" and hi["timestamp"] == ""

    dropped_only = await merged(
        tools,
        [
            {"role": "user", "content": 5},
            {"role": 1, "content": None, "user_id": []},
        ],
        query="zebra crossing",
    )
    assert dropped_only["context_field_issues"]["entries"] == [
        {"index": 0, "fields": ["content"]},
        {"index": 1, "fields": ["content", "role", "user_id"]},
    ]
    assert dropped_only["messages"] == []

    mixed = await merged(
        tools,
        [{"role": "user", "content": 5}, {"role": "user", "content": "ok", "name": False}],
        query="zebra crossing",
    )
    notes = {
        merged_only["context_field_issues"]["note"],
        dropped_only["context_field_issues"]["note"],
        mixed["context_field_issues"]["note"],
    }
    assert len(notes) == 3 and all(isinstance(n, str) and n for n in notes)


async def test_reject_mode_refuses_before_recalling(connect):
    async with connect(external_context_mode="reject") as t:
        await t.store("standup note one")
        out = await t(
            "recall_with_context",
            {
                "agent_id": AGENT,
                "query": "standup",
                "external_context": [
                    {"role": "user", "content": "ok"},
                    {"role": "user", "content": "hi", "name": 3},
                ],
            },
        )
        good = await merged(t, [{"role": "user", "content": "ok"}])
    assert set(out) == {"ok", "error", "messages"}
    assert out["ok"] is False and out["messages"] == []
    assert "[1]" in out["error"] and "name" in out["error"]
    assert "context_field_issues" not in good and len(good["messages"]) == 2


async def test_off_mode_reports_nothing(connect):
    async with connect(external_context_mode="off") as t:
        out = await merged(t, [{"role": "user", "content": "hi", "name": 3}], query="zebra")
    assert out == {"messages": [said("hi", user("User", "User"))]}


async def test_non_object_entries_are_refused_by_the_schema(tools):
    result = await tools.raw(
        "recall_with_context", {"agent_id": AGENT, "query": "q", "external_context": ["just text"]}
    )
    assert result.is_error


async def test_gate_fallback_is_forwarded(connect):
    async with connect(confidence_enabled=True) as t:
        await t.store(LEXICAL)
        out = await t(
            "recall_with_context",
            {
                "agent_id": AGENT,
                "query": IDENT,
                "external_context": [{"role": "user", "content": "status?"}],
            },
        )
    assert out["gate_fallback"] is True
    assert [m["content"] for m in out["messages"]] == ["status?", LEXICAL]  # undated first


async def test_microseconds_order_even_far_from_the_epoch(tools):
    # Instants, not floats: one microsecond apart in year 9000 still sorts correctly.
    out = await merged(
        tools,
        [
            {"role": "user", "content": "later", "timestamp": "9000-01-01T00:00:00.000002Z"},
            {"role": "user", "content": "earlier", "timestamp": "9000-01-01T09:00:00.000001+09:00"},
            {"role": "user", "content": "earliest", "timestamp": "1000-01-01T00:00:00.000001"},
            {"role": "user", "content": "first", "timestamp": "1000-01-01T00:00:00"},
        ],
        query="zebra crossing",
    )
    assert [m["content"] for m in out["messages"]] == ["first", "earliest", "earlier", "later"]
