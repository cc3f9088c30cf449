"""The edit tools through the MCP client: update_memory, delete_memory, lock_memory,
unlock_memory, archive_episode, delete_episode, update_profile, get_profile.

Spec: surface.md §3.5, §3.6, §4.1, §4.2, §4.6-§4.8, §6.3 (empty agent_id = unscoped).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from cpersona.embedding.hashing import HashingProvider
from cpersona.fts.search import ranked
from cpersona.models import ProjectFilter
from cpersona.storage import memories as memory_sql
from cpersona.storage.search import ScopeSql

pytestmark = pytest.mark.anyio


async def store(tools: Any, content: str, agent: str = "alice", **kw: Any) -> int:
    out = await tools("store", {"agent_id": agent, "message": {"content": content}, **kw})
    assert out["result"] == "stored", out
    return out["id"]


async def row(tools: Any, memory_id: int) -> dict | None:
    listed = (await tools("list_memories", {"agent_id": "", "limit": 500}))["memories"]
    found = [r for r in listed if r["id"] == memory_id]
    return found[0] if found else None


def ambiguous(memory_id: int) -> dict:
    return {"ok": False, "error": f"Memory {memory_id} not found, not owned by agent, or locked"}


def fail(error: str) -> dict:
    return {"ok": False, "error": error}


def embedding(tools: Any, memory_id: int) -> bytes | None:
    found = tools.engine.db.query_one("SELECT embedding FROM memories WHERE id = ?", (memory_id,))
    return found[0]


def fts_ids(tools: Any, term: str, agent: str = "alice") -> list[int]:
    """Rows whose text holds `term` as one phrase: FTS5's table on SQLite, the full-text index
    (the only full-text arm) on PostgreSQL."""
    if tools.engine.db.dialect == "postgresql":
        scope = ScopeSql(agent, ProjectFilter(None), "")
        found = ranked(tools.engine.fts["memories"], [term], scope, "", 50)
        assert found is not None
        return [row_id for row_id, _ in found]
    return [m.id for m in memory_sql.search_fts(tools.engine.db, f'"{term}"', agent, 50)]


# -- update_memory -----------------------------------------------------------------------------


async def test_update_replaces_content_and_nothing_else(tools):
    mid = await tools(
        "store",
        {
            "agent_id": "alice",
            "message": {
                "id": "m1",
                "content": "pool size is 20",
                "source": {"type": "User", "id": "u", "name": "n"},
                "timestamp": "2026-10-01T09:00:00+09:00",
                "metadata": {"k": 1},
            },
            "channel": "c",
            "project_id": "p",
        },
    )
    mid = mid["id"]
    before = await row(tools, mid)
    old_vec = embedding(tools, mid)
    out = await tools(
        "update_memory", {"memory_id": mid, "content": "pool size is 40", "agent_id": "alice"}
    )
    assert out == {"ok": True, "updated_id": mid}
    after = await row(tools, mid)
    assert after == {**before, "content": "pool size is 40"}
    stored = memory_sql.get(tools.engine.db.reader(), mid)
    assert (stored.msg_id, stored.metadata) == ("m1", '{"k": 1}')
    # Re-embedded from the new text; the FTS index follows.
    new_vec = embedding(tools, mid)
    assert new_vec != old_vec
    expected = HashingProvider().embed(["pool size is 40"]).astype("<f4").tobytes()
    assert new_vec == expected
    assert fts_ids(tools, "size is 40") == [mid]
    assert fts_ids(tools, "size is 20") == []


async def test_update_unscoped_works_on_any_agent(tools):
    mid = await store(tools, "old", agent="bob")
    assert await tools("update_memory", {"memory_id": mid, "content": "new"}) == {
        "ok": True,
        "updated_id": mid,
    }
    assert (await row(tools, mid))["content"] == "new"


async def test_update_sanitises_and_reports_truncation(tools):
    mid = await store(tools, "old")
    long = "[Memory from x] " + "z" * 16005
    out = await tools("update_memory", {"memory_id": mid, "content": long})
    assert out == {"ok": True, "updated_id": mid, "truncated": True}
    assert (await row(tools, mid))["content"] == "z" * 16000
    out = await tools("update_memory", {"memory_id": mid, "content": "  [Memory from x] short "})
    assert out == {"ok": True, "updated_id": mid}
    assert (await row(tools, mid))["content"] == "short"


@pytest.mark.parametrize(
    ("content", "error"),
    [
        ("", "Content cannot be empty"),
        ("  \n ", "Content cannot be empty"),
        ("[Memory from bob]", "Content cannot be empty after sanitization"),
    ],
)
async def test_update_refuses_empty_content(tools, content, error):
    mid = await store(tools, "keep me")
    before = await tools.snapshot()
    assert await tools("update_memory", {"memory_id": mid, "content": content}) == fail(error)
    assert await tools.snapshot() == before


async def test_update_empty_content_is_checked_before_the_row(tools):
    assert await tools("update_memory", {"memory_id": 999, "content": ""}) == fail(
        "Content cannot be empty"
    )


async def test_update_missing_row(tools):
    await store(tools, "x")
    before = await tools.snapshot()
    assert await tools("update_memory", {"memory_id": 999, "content": "y"}) == fail(
        "Memory 999 not found"
    )
    scoped = {"memory_id": 999, "content": "y", "agent_id": "alice"}
    assert await tools("update_memory", scoped) == ambiguous(999)
    assert await tools.snapshot() == before


async def test_update_of_another_agents_row_is_refused_ambiguously(tools):
    mid = await store(tools, "bob's note", agent="bob")
    before = await tools.snapshot()
    vec = embedding(tools, mid)
    out = await tools("update_memory", {"memory_id": mid, "content": "hijack", "agent_id": "alice"})
    assert out == ambiguous(mid)
    assert await tools.snapshot() == before
    assert embedding(tools, mid) == vec


async def test_update_locked_row_refuses_in_both_wordings(tools):
    mid = await store(tools, "precious")
    await tools("lock_memory", {"memory_id": mid})
    before = await tools.snapshot()
    scoped = {"memory_id": mid, "content": "x", "agent_id": "alice"}
    assert await tools("update_memory", scoped) == ambiguous(mid)
    assert await tools("update_memory", {"memory_id": mid, "content": "x"}) == fail(
        f"Memory {mid} is locked and cannot be edited"
    )
    assert await tools.snapshot() == before


async def test_update_collision_answers_ok_false_and_changes_nothing(tools):
    a = await store(tools, "first", channel="c")
    b = await store(tools, "second", channel="c")
    before = await tools.snapshot()
    out = await tools("update_memory", {"memory_id": b, "content": "first"})
    assert set(out) == {"ok", "error"} and out["ok"] is False
    assert str(b) in out["error"]
    assert await tools.snapshot() == before
    # Same text in another channel is no collision; the same text as itself is fine too.
    c = await store(tools, "third", channel="d")
    assert (await tools("update_memory", {"memory_id": c, "content": "first"}))["ok"] is True
    assert (await tools("update_memory", {"memory_id": a, "content": "first"}))["ok"] is True


async def test_updated_text_takes_part_in_store_dedup(tools):
    mid = await store(tools, "old text")
    await tools("update_memory", {"memory_id": mid, "content": "new text"})
    again = await tools("store", {"agent_id": "alice", "message": {"content": "new text"}})
    assert again == {"ok": True, "result": "skipped", "reason": "duplicate content", "id": mid}
    assert (await tools("store", {"agent_id": "alice", "message": {"content": "old text"}}))[
        "result"
    ] == "stored"


async def test_integral_float_id_is_coerced_to_zero(tools):
    # 3.0 passes the schema's integer check and then reads as the default 0 (surface.md §1.2).
    mid = await store(tools, "x")
    assert mid == 1
    before = await tools.snapshot()
    assert await tools("update_memory", {"memory_id": 1.0, "content": "y"}) == fail(
        "Memory 0 not found"
    )
    assert await tools("delete_memory", {"memory_id": 1.0}) == fail("Memory 0 not found")
    assert await tools.snapshot() == before


# -- delete_memory -----------------------------------------------------------------------------


async def test_delete_scoped_and_unscoped(tools):
    a = await store(tools, "alpha note")
    b = await store(tools, "beta note", agent="bob")
    assert await tools("delete_memory", {"memory_id": a, "agent_id": "alice"}) == {
        "ok": True,
        "deleted_id": a,
    }
    assert await tools("delete_memory", {"memory_id": b}) == {"ok": True, "deleted_id": b}
    assert (await tools("list_memories", {}))["memories"] == []
    assert fts_ids(tools, "alpha") == []
    # Deleting again: the row is gone.
    assert await tools("delete_memory", {"memory_id": a}) == fail(f"Memory {a} not found")
    assert await tools("delete_memory", {"memory_id": a, "agent_id": "alice"}) == ambiguous(a)
    # The text can be stored again as a new row.
    assert await store(tools, "alpha note") not in (a, b)


async def test_delete_of_another_agents_row_is_refused(tools):
    mid = await store(tools, "bob's", agent="bob")
    before = await tools.snapshot()
    assert await tools("delete_memory", {"memory_id": mid, "agent_id": "alice"}) == ambiguous(mid)
    assert await tools.snapshot() == before


async def test_delete_locked_row_refuses_in_both_wordings(tools):
    mid = await store(tools, "precious")
    assert await tools("lock_memory", {"memory_id": mid, "agent_id": "alice"}) == {
        "ok": True,
        "locked_id": mid,
    }
    before = await tools.snapshot()
    assert await tools("delete_memory", {"memory_id": mid, "agent_id": "alice"}) == ambiguous(mid)
    assert await tools("delete_memory", {"memory_id": mid}) == fail(
        f"Memory {mid} is locked and cannot be deleted"
    )
    assert await tools.snapshot() == before


# -- lock_memory / unlock_memory ---------------------------------------------------------------


async def test_lock_and_unlock_round_trip(tools):
    mid = await store(tools, "x")
    assert (await row(tools, mid))["locked"] is False
    for _ in range(2):  # re-locking a locked row succeeds
        assert await tools("lock_memory", {"memory_id": mid}) == {"ok": True, "locked_id": mid}
        assert (await row(tools, mid))["locked"] is True
    for _ in range(2):
        assert await tools("unlock_memory", {"memory_id": mid, "agent_id": "alice"}) == {
            "ok": True,
            "unlocked_id": mid,
        }
        assert (await row(tools, mid))["locked"] is False
    assert (await tools("update_memory", {"memory_id": mid, "content": "y"}))["ok"] is True


async def test_lock_does_not_change_content_or_listing(tools):
    mid = await store(tools, "x")
    before = await row(tools, mid)
    await tools("lock_memory", {"memory_id": mid})
    assert await row(tools, mid) == {**before, "locked": True}


@pytest.mark.parametrize("tool", ["lock_memory", "unlock_memory"])
async def test_lock_refusals(tools, tool):
    mid = await store(tools, "bob's", agent="bob")
    if tool == "unlock_memory":
        await tools("lock_memory", {"memory_id": mid})
    before = await tools.snapshot()
    assert await tools(tool, {"memory_id": mid, "agent_id": "alice"}) == ambiguous(mid)
    assert await tools(tool, {"memory_id": 999}) == fail("Memory 999 not found")
    assert await tools(tool, {"memory_id": 999, "agent_id": "bob"}) == ambiguous(999)
    assert await tools.snapshot() == before


# -- archive_episode / delete_episode ----------------------------------------------------------

EPISODE_KEYS = {
    "id",
    "agent_id",
    "project_id",
    "summary",
    "keywords",
    "start_time",
    "end_time",
    "created_at",
}


async def episodes(tools: Any, **kw: Any) -> list[dict]:
    return (await tools("list_episodes", {"agent_id": "", **kw}))["episodes"]


async def test_archive_episode_success_and_listing(tools):
    out = await tools(
        "archive_episode",
        {
            "agent_id": "alice",
            "summary": "  [Memory from x] discussed deploys ",
            "keywords": "deploy backup",
            "history": [
                {"timestamp": "2026-01-01T10:00:00+09:00", "content": "a"},
                {"timestamp": "2026-01-01T00:30:00Z"},
                {"timestamp": "not a time"},
                {"role": "user"},
                {"timestamp": 5},
            ],
            "resolved": True,
            "project_id": "p",
            "channel": "c",
            "session_key": "s",
        },
    )
    assert out == {"ok": True, "episode_id": out["episode_id"]}
    [ep] = await episodes(tools)
    assert set(ep) == EPISODE_KEYS
    assert ep == {
        "id": out["episode_id"],
        "agent_id": "alice",
        "project_id": "p",
        "summary": "discussed deploys",
        "keywords": "deploy backup",
        # Earliest and latest by instant, each kept as spelled (01:00Z vs 00:30Z).
        "start_time": "2026-01-01T00:30:00Z",
        "end_time": "2026-01-01T10:00:00+09:00",
        "created_at": ep["created_at"],
    }
    raw = tools.engine.db.query_one(
        f"SELECT resolved, channel, {tools.engine.db.ops.byte_length('embedding')} "
        "FROM episodes WHERE id = ?",
        (out["episode_id"],),
    )
    assert tuple(raw) == (1, "c", 4 * 384)


@pytest.mark.parametrize(
    ("history", "span"),
    [
        ([], (None, None)),
        ([{"timestamp": ""}], (None, None)),
        ([{"timestamp": "b-stamp"}, {"timestamp": "a-stamp"}], ("a-stamp", "b-stamp")),
        ([{"timestamp": "2026-01-02"}, {"timestamp": "zzz"}], ("2026-01-02", "2026-01-02")),
    ],
)
async def test_archive_episode_history_span(tools, history, span):
    await tools("archive_episode", {"agent_id": "a", "summary": "s", "history": history})
    [ep] = await episodes(tools)
    assert (ep["start_time"], ep["end_time"]) == span


async def test_archive_episode_defaults_and_appends(tools):
    first = await tools("archive_episode", {"agent_id": "alice", "summary": "same"})
    second = await tools("archive_episode", {"agent_id": "alice", "summary": "same"})
    assert first["episode_id"] != second["episode_id"]
    listed = await episodes(tools)
    assert [e["id"] for e in listed] == [second["episode_id"], first["episode_id"]]
    assert listed[0]["keywords"] == "" and listed[0]["project_id"] == ""
    raw = tools.engine.db.query_one("SELECT resolved, channel FROM episodes LIMIT 1")
    assert tuple(raw) == (0, "")


async def test_archive_episode_truncation(tools):
    out = await tools("archive_episode", {"agent_id": "a", "summary": "s" * 16001})
    assert out == {"ok": True, "episode_id": out["episode_id"], "truncated": True}
    out = await tools("archive_episode", {"agent_id": "a", "summary": "t", "keywords": "k" * 16001})
    assert out == {"ok": True, "episode_id": out["episode_id"], "truncated": True}
    listed = await episodes(tools)
    assert len(listed[0]["keywords"]) == 16000 and len(listed[1]["summary"]) == 16000


@pytest.mark.parametrize(
    ("summary", "error"),
    [
        (
            "",
            "summary is required: server-side episode summarisation was removed; pre-compute "
            "summary (and keywords) before calling archive_episode",
        ),
        ("   ", "summary is required to archive an episode"),
        ("[Memory from bob]", "summary is required to archive an episode"),
    ],
)
async def test_archive_episode_refusals(tools, summary, error):
    before = await tools.snapshot()
    out = await tools("archive_episode", {"agent_id": "a", "summary": summary})
    assert out == {"ok": False, "episode_id": None, "error": error}
    assert await tools.snapshot() == before


async def test_delete_episode(tools):
    mine = await tools("archive_episode", {"agent_id": "alice", "summary": "mine"})
    theirs = await tools("archive_episode", {"agent_id": "bob", "summary": "theirs"})
    mine, theirs = mine["episode_id"], theirs["episode_id"]
    before = await tools.snapshot()
    missing = {"ok": False, "error": f"Episode {theirs} not found or not owned by agent"}
    assert await tools("delete_episode", {"episode_id": theirs, "agent_id": "alice"}) == missing
    assert await tools("delete_episode", {"episode_id": 999}) == {
        "ok": False,
        "error": "Episode 999 not found or not owned by agent",
    }
    assert await tools.snapshot() == before
    assert await tools("delete_episode", {"episode_id": mine, "agent_id": "alice"}) == {
        "ok": True,
        "deleted_id": mine,
    }
    assert await tools("delete_episode", {"episode_id": theirs}) == {
        "ok": True,
        "deleted_id": theirs,
    }
    assert await episodes(tools) == []
    if tools.engine.db.dialect == "postgresql":  # the full-text index: nothing left in it
        assert tools.engine.fts["episodes"].current().ids().tolist() == []
        return
    found = tools.engine.db.query("SELECT rowid FROM episodes_fts WHERE episodes_fts MATCH 'mine'")
    assert found == []


# -- profiles ----------------------------------------------------------------------------------


async def test_profile_round_trip_replaces(tools):
    assert await tools("get_profile", {"agent_id": "alice"}) == {"profile": ""}
    assert await tools("update_profile", {"agent_id": "alice", "profile": "first"}) == {
        "ok": True,
        "profiles_updated": 1,
    }
    assert await tools("update_profile", {"agent_id": "alice", "profile": " second "}) == {
        "ok": True,
        "profiles_updated": 1,
    }
    assert await tools("get_profile", {"agent_id": "alice"}) == {"profile": "second"}
    assert await tools("get_profile", {"agent_id": "bob"}) == {"profile": ""}
    assert await tools("get_profile", {"agent_id": ""}) == {"profile": ""}
    rows = tools.engine.db.query("SELECT agent_id, user_id, project_id FROM profiles")
    assert [tuple(r) for r in rows] == [("alice", "", "")]


async def test_profile_of_the_empty_agent_bucket(tools):
    await tools("update_profile", {"agent_id": "", "profile": "nobody"})
    assert await tools("get_profile", {"agent_id": ""}) == {"profile": "nobody"}
    assert await tools("get_profile", {"agent_id": "alice"}) == {"profile": ""}


async def test_profile_cap_and_annotation(tools):
    out = await tools("update_profile", {"agent_id": "a", "profile": "p" * 2001})
    assert out == {"ok": True, "profiles_updated": 1, "truncated": True}
    assert await tools("get_profile", {"agent_id": "a"}) == {"profile": "p" * 2000}
    long = "[Memory from x] " + "q" * 2000
    out = await tools("update_profile", {"agent_id": "a", "profile": long})
    assert out == {"ok": True, "profiles_updated": 1}
    assert await tools("get_profile", {"agent_id": "a"}) == {"profile": "q" * 2000}


async def test_profile_cap_follows_the_setting(connect):
    async with connect(max_profile_length=3) as tools:
        out = await tools("update_profile", {"agent_id": "a", "profile": "abcd"})
        assert out["truncated"] is True
        assert await tools("get_profile", {"agent_id": "a"}) == {"profile": "abc"}


@pytest.mark.parametrize(
    ("profile", "reason"),
    [
        ("", "empty profile"),
        (" \n", "empty after sanitization"),
        ("[Memory from x]", "empty after sanitization"),
    ],
)
async def test_profile_refusals(tools, profile, reason):
    await tools("update_profile", {"agent_id": "a", "profile": "kept"})
    before = await tools.snapshot()
    out = await tools("update_profile", {"agent_id": "a", "profile": profile})
    # 2.5.x answers with `reason` only; cpersona adds `error` (retrieval.md §19.4).
    assert out == {"ok": False, "profiles_updated": 0, "reason": reason, "error": reason}
    assert await tools.snapshot() == before
    assert await tools("get_profile", {"agent_id": "a"}) == {"profile": "kept"}


async def test_embeddings_are_float32_blobs_of_the_provider_width(tools):
    texts = ["the deploy needs --force", "会議は毎週火曜日", "x"]
    ids = [await store(tools, t) for t in texts]
    provider = HashingProvider()
    for mid, text in zip(ids, texts, strict=True):
        blob = embedding(tools, mid)
        assert isinstance(blob, bytes) and len(blob) == 4 * provider.dim()
        vec = np.frombuffer(blob, dtype="<f4")
        assert np.array_equal(vec, provider.embed([text])[0])
        assert abs(float(np.linalg.norm(vec)) - 1.0) < 1e-5


async def test_every_embedding_is_a_float32_blob_in_its_row(tools):
    provider = HashingProvider()
    mid = await store(tools, "first text")
    await tools("update_memory", {"memory_id": mid, "content": "second text"})
    await store(tools, "会議は毎週火曜日", agent="bob", channel="c", project_id="p")
    ep = await tools(
        "archive_episode", {"agent_id": "alice", "summary": "  the summary  ", "keywords": "k"}
    )
    rows = tools.engine.db.query(
        "SELECT 'memories', content, embedding FROM memories "
        "UNION ALL SELECT 'episodes', summary, embedding FROM episodes"
    )
    assert len(rows) == 3
    for table, text, blob in rows:
        assert isinstance(blob, bytes) and len(blob) == 4 * provider.dim(), table
        assert blob == provider.embed([text]).astype("<f4").tobytes(), (table, text)
    assert ep["ok"] is True
