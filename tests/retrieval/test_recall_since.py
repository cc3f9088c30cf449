"""Time-scoped recall and listings (issue 22): `since` / `until` through a real MCP client.

A row's time is the instant its `timestamp` names (episodes: the history's start), else its
`created_at`; `since` is inclusive, `until` exclusive, an offset-less instant is UTC and a bare
date is its 00:00 UTC. The range is applied inside each retriever, so the vector window of a
range in the past is that range's newest rows, not the table's. Runs on the Rust kernels and
the numpy twin over SQLite, and over PostgreSQL (the `kernel` and `store_backend` fixtures).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

pytestmark = pytest.mark.anyio

# Only the vector arm finds X for QUERY (no shared 3-character term; cosine ~0.59 with the
# hashing embedder): test_recall_window.py.
X = "rollout strategy for kubernetes clusters"
QUERY = "rollouts strategies kubernetes-cluster"
FILLERS = [f"lunch menu item {i}" for i in range(6)]
OLD = "2023-05-01T10:00:00+00:00"
NEW = "2026-01-15T10:00:00+00:00"
TOOLS = ("recall", "recall_with_context", "list_memories", "list_episodes", "export_memories")


def _instant(stamp: str) -> datetime:
    t = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    return t if t.tzinfo else t.replace(tzinfo=UTC)


async def test_a_past_range_has_a_window_of_its_own(connect, store_backend):
    async with connect(max_memories=3) as t:
        await t.store(X, timestamp=OLD)
        for filler in FILLERS:
            await t.store(filler, timestamp=NEW)
        unscoped = await t.contents(QUERY, deep=True)
        assert X not in unscoped  # six newer rows fill the 3-row window
        ranged = await t.messages(QUERY, deep=True, since="2023-05-01", until="2023-05-02")
        assert [m["content"] for m in ranged] == [X]
        assert ranged[0]["match_reason"]["signal"] == "cosine"
        # The same row through recall_with_context, merged with the caller's turn.
        out = await t(
            "recall_with_context",
            {
                "agent_id": "alice",
                "query": QUERY,
                "deep": True,
                "since": "2023-05-01",
                "until": "2023-05-02",
                "external_context": [{"role": "user", "content": "hi", "timestamp": NEW}],
            },
        )
        assert [m["content"] for m in out["messages"]] == [X, "hi"]


async def test_every_arm_returns_only_rows_in_the_range(connect, store_backend):
    stamps = [f"2024-0{m}-15T12:00:00+00:00" for m in range(1, 8)]
    async with connect() as t:
        for i, stamp in enumerate(stamps):
            await t.store(f"kubernetes rollout note {i}", timestamp=stamp)
        await t.episode(
            "kubernetes rollout retrospective",
            history=[{"timestamp": "2024-03-20T08:00:00Z", "content": "x"}],
        )
        await t.episode(
            "kubernetes rollout planning",
            history=[{"timestamp": "2024-06-20T08:00:00Z", "content": "x"}],
        )
        since, until = "2024-03-01", "2024-05-15T12:00:00Z"  # until is exclusive
        lo, hi = _instant(since + "T00:00:00"), _instant(until)
        seen = set()
        for mode in ("rrf", "rsf", "cascade"):
            async with connect(recall_mode=mode) as m:
                # Vector, full-text, LIKE (a word FTS cannot match) and recency (blank query).
                for query in ("kubernetes rollout", "rollout note", "kub", ""):
                    got = await m.messages(query, deep=True, since=since, until=until)
                    for msg in got:
                        assert lo <= _instant(msg["timestamp"]) < hi, (mode, query, msg)
                    seen |= {(mode, query) for _ in got[:1]}
        assert len(seen) >= 9, seen
        everything = await t.contents("kubernetes rollout", deep=True, limit=20)
        bounds = {"since": since, "until": until}
        ranged = await t.contents("kubernetes rollout", deep=True, limit=20, **bounds)
        assert set(ranged) == {
            "kubernetes rollout note 2",
            "kubernetes rollout note 3",
            "[Episode] kubernetes rollout retrospective",
        }
        assert set(ranged) < set(everything)


async def test_offsets_dates_and_offsetless_instants(tools, store_backend):
    # 2024-03-10T23:30-02:00 is 2024-03-11T01:30Z.
    await tools.store("zephyr offset row", timestamp="2024-03-10T23:30:00-02:00")

    async def found(**bounds: str) -> bool:
        listed = await tools("list_memories", {"agent_id": "alice", **bounds})
        return [m["content"] for m in listed["memories"]] == ["zephyr offset row"]

    assert await found(since="2024-03-11")  # a date is its 00:00 UTC
    assert not await found(since="2024-03-12")
    assert not await found(until="2024-03-11T01:30:00Z")  # until is exclusive
    assert await found(until="2024-03-11T01:30:00.000001")  # no offset: UTC
    assert await found(since="2024-03-11T10:30:00+09:00")  # since is inclusive
    assert not await found(since="2024-03-11T10:30:00.000001+09:00")
    assert await found(since="2024-03-10T20:00:00-05:00", until="2024-03-11T02:00:00+00:29")
    recalled = await tools.contents("zephyr", since="2024-03-11", until="2024-03-12")
    assert recalled == ["zephyr offset row"]


async def test_a_row_without_a_readable_timestamp_is_timed_by_created_at(tools, store_backend):
    await tools.store("quokka undated row", timestamp="sometime last spring")
    today = datetime.now(UTC).date()
    recent = {"since": (today - timedelta(days=1)).isoformat()}
    past = {"since": "2020-01-01", "until": "2021-01-01"}
    assert await tools.contents("quokka", **recent) == ["quokka undated row"]
    assert await tools.contents("quokka", **past) == []
    listed = await tools("list_memories", {"agent_id": "alice", **recent})
    assert [m["content"] for m in listed["memories"]] == ["quokka undated row"]


@pytest.mark.parametrize(
    ("bounds", "named"),
    [
        ({"since": "last tuesday"}, "since"),
        ({"until": "2024-13-01"}, "until"),
        ({"since": ""}, "since"),
        ({"since": "2024-05-01", "until": "2024-04-30T23:59:59Z"}, "until"),
        ({"since": "2024-05-01T00:00:00+02:00", "until": "2024-04-30T22:00:00Z"}, "until"),
    ],
)
async def test_malformed_and_reversed_ranges_are_refused(
    tools, store_backend, tmp_path, bounds, named
):
    await tools.store("kept row", timestamp=OLD)
    before = await tools("list_memories", {"agent_id": "alice"})
    calls = {
        "recall": {"agent_id": "alice", "query": "kept"},
        "recall_with_context": {"agent_id": "alice", "query": "kept", "external_context": []},
        "list_memories": {"agent_id": "alice"},
        "list_episodes": {"agent_id": "alice"},
        "export_memories": {"agent_id": "alice", "output_path": str(tmp_path / "out.jsonl")},
    }
    for tool in TOOLS:
        out = await tools(tool, {**calls[tool], **bounds})
        assert out["ok"] is False, (tool, out)
        assert named in out["error"], (tool, out)
    assert not (tmp_path / "out.jsonl").exists()
    assert await tools("list_memories", {"agent_id": "alice"}) == before


async def test_a_non_string_bound_is_a_schema_error(tools, store_backend):
    result = await tools.raw("recall", {"agent_id": "alice", "query": "x", "since": 20240501})
    assert result.is_error and "since" in result.content[0].text


async def test_time_scoped_listings_and_export(tools, store_backend, tmp_path: Path):
    for month in range(1, 7):
        await tools.store(f"monthly note {month}", timestamp=f"2024-0{month}-10T00:00:00Z")
    for month in (2, 5):
        await tools.episode(
            f"episode of month {month}",
            history=[{"timestamp": f"2024-0{month}-03T00:00:00+01:00", "content": "c"}],
        )
    window = {"since": "2024-02-01", "until": "2024-05-10T00:00:00Z"}
    listed = await tools("list_memories", {"agent_id": "alice", **window})
    # Newest first by created_at, as without a range; the limit counts in-range rows.
    assert [m["content"] for m in listed["memories"]] == [
        "monthly note 4",
        "monthly note 3",
        "monthly note 2",
    ]
    assert listed["count"] == 3
    first = await tools("list_memories", {"agent_id": "alice", "limit": 2, **window})
    assert [m["content"] for m in first["memories"]] == ["monthly note 4", "monthly note 3"]
    episodes = await tools("list_episodes", {"agent_id": "alice", **window})
    summaries = [e["summary"] for e in episodes["episodes"]]
    assert summaries == ["episode of month 5", "episode of month 2"]
    march = await tools("list_episodes", {"agent_id": "alice", "since": "2024-03-01"})
    assert [e["summary"] for e in march["episodes"]] == ["episode of month 5"]

    path = tmp_path / "range.jsonl"
    out = await tools("export_memories", {"agent_id": "alice", "output_path": str(path), **window})
    assert out["ok"] is True and (out["memories"], out["episodes"]) == (3, 2)
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    header, body = lines[0], lines[1:]
    assert (header["memory_count"], header["episode_count"]) == (3, 2)  # what the body holds
    contents = sorted(r.get("content") or r.get("summary") for r in body)
    assert contents == [
        "episode of month 2",
        "episode of month 5",
        "monthly note 2",
        "monthly note 3",
        "monthly note 4",
    ]
    whole = tmp_path / "all.jsonl"
    full = await tools("export_memories", {"agent_id": "alice", "output_path": str(whole)})
    assert (full["memories"], full["episodes"]) == (6, 2)
