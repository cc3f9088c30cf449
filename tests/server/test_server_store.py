"""`store` through the MCP client: shapes, the dedup rules, sanitising, sources, timestamps.

Spec: surface.md §3.1 (shapes), §5 (pipeline, caps, source normalisation, dedup, future stamps).
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from cpersona.config import Settings
from cpersona.storage import memories as memory_sql

pytestmark = pytest.mark.anyio

STORED_KEYS = {"ok", "result", "id", "embedded"}


async def store(tools: Any, content: Any = None, agent: str = "alice", **kw: Any) -> dict:
    message: dict[str, Any] = dict(kw.pop("message", {}))
    if content is not None:
        message["content"] = content
    return await tools("store", {"agent_id": agent, "message": message, **kw})


async def rows(tools: Any, agent: str = "") -> list[dict]:
    return (await tools("list_memories", {"agent_id": agent, "limit": 500}))["memories"]


async def row(tools: Any, memory_id: int) -> dict:
    found = [r for r in await rows(tools) if r["id"] == memory_id]
    assert len(found) == 1, memory_id
    return found[0]


# -- shapes ------------------------------------------------------------------------------------


async def test_stored_shape_is_exact(tools):
    out = await store(tools, "the deploy needs --force")
    assert set(out) == STORED_KEYS
    assert out["ok"] is True and out["result"] == "stored"
    assert isinstance(out["id"], int) and out["embedded"] is True
    listed = await rows(tools)
    assert [r["content"] for r in listed] == ["the deploy needs --force"]


async def test_stored_row_keeps_every_field(tools):
    out = await store(
        tools,
        "pool size is 20",
        message={
            "id": "m-1",
            "source": {"type": "User", "id": "u1", "name": "Ann"},
            "timestamp": "2026-10-01T09:00:00+09:00",
            "metadata": {"k": [1, 2]},
        },
        channel="discord:general",
        project_id="proj-x",
        session_key="s1",
    )
    r = await row(tools, out["id"])
    assert r == {
        "id": out["id"],
        "agent_id": "alice",
        "project_id": "proj-x",
        "content": "pool size is 20",
        "source": {"type": "User", "id": "u1", "name": "Ann"},
        "timestamp": "2026-10-01T09:00:00+09:00",
        "created_at": r["created_at"],
        "locked": False,
        "channel": "discord:general",
    }
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", r["created_at"])
    stored = memory_sql.get(tools.engine.db.reader(), out["id"])
    assert stored.msg_id == "m-1"
    # Python's json.dumps style, the byte format of CPersona 2.5.x (surface.md §5.2).
    assert stored.metadata == '{"k": [1, 2]}'
    assert stored.source == '{"type": "User", "id": "u1", "name": "Ann"}'


async def test_default_timestamp_is_utc_iso_with_microseconds(tools):
    before = datetime.now(UTC)
    out = await store(tools, "no stamp given")
    stamp = (await row(tools, out["id"]))["timestamp"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}\+00:00", stamp), stamp
    assert before - timedelta(seconds=1) <= datetime.fromisoformat(stamp) <= datetime.now(UTC)


async def test_default_timestamp_keeps_a_zero_fraction(tools, monkeypatch):
    from cpersona.memory import text

    class Frozen(datetime):
        @classmethod
        def now(cls, tz=None):  # type: ignore[override]
            return datetime(2026, 3, 4, 5, 6, 7, 0, tzinfo=tz)

    monkeypatch.setattr(text, "datetime", Frozen)
    out = await store(tools, "on the second")
    assert (await row(tools, out["id"]))["timestamp"] == "2026-03-04T05:06:07.000000+00:00"


async def test_non_ascii_is_stored_and_answered_unescaped(tools):
    out = await store(tools, "会議は毎週火曜日 — café 😀")
    raw = await tools.raw("list_memories", {"agent_id": "alice"})
    assert "会議は毎週火曜日 — café 😀" in raw.content[0].text
    assert (await row(tools, out["id"]))["content"] == "会議は毎週火曜日 — café 😀"


async def test_empty_agent_bucket_is_writable(tools):
    out = await store(tools, "nobody's note", agent="")
    assert out["result"] == "stored"
    assert (await row(tools, out["id"]))["agent_id"] == ""


async def test_channel_is_stored_verbatim_and_auto_project_is_literal(tools):
    out = await store(tools, "x", channel=" Discord:General ", project_id="@auto")
    assert out["resolved_project_id"] == "@auto"
    assert set(out) == STORED_KEYS | {"resolved_project_id"}
    r = await row(tools, out["id"])
    assert (r["channel"], r["project_id"]) == (" Discord:General ", "@auto")


async def test_unknown_argument_keys_are_ignored(tools):
    out = await tools(
        "store",
        {"agent_id": "a", "message": {"content": "x", "extra": 1}, "bogus": {"y": 2}},
    )
    assert out["result"] == "stored"


async def test_embedded_is_false_without_an_embedder(tmp_path):
    from cpersona.embedding.none import NoneProvider
    from cpersona.engine import Engine
    from cpersona.server.app import build_server
    from mcp import Client

    settings = Settings(db_path=str(tmp_path / "none.db"), embedding_mode="none")
    engine = Engine(settings, embedder=NoneProvider())
    try:
        async with Client(build_server(engine), raise_exceptions=True) as client:
            res = await client.call_tool("store", {"agent_id": "a", "message": {"content": "x"}})
        out = json.loads(res.content[0].text)
        assert out == {"ok": True, "result": "stored", "id": out["id"], "embedded": False}
        assert engine.db.query_one("SELECT embedding FROM memories")[0] is None
    finally:
        engine.close()


# -- rejections --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("message", "reason"),
    [
        ({}, "empty content"),
        ({"content": ""}, "empty content"),
        ({"id": "m1"}, "empty content"),
        ({"content": "   \n\t "}, "empty after sanitization"),
        ({"content": "[Memory from bob on 2026-01-01]"}, "empty after sanitization"),
        ({"content": "[Memory from a] [Memory from b]  "}, "empty after sanitization"),
    ],
)
async def test_rejections_have_the_store_shape(tools, message, reason):
    before = await tools.snapshot()
    out = await tools("store", {"agent_id": "alice", "message": message})
    assert out == {"ok": False, "result": "rejected", "reason": reason}
    assert await tools.snapshot() == before


async def test_metadata_cap_is_measured_on_serialised_json(tools):
    # json.dumps({"k": v}) is 9 characters plus the value: 7991 -> exactly 8000.
    ok = await store(tools, "at the cap", message={"metadata": {"k": "v" * 7991}})
    assert ok["result"] == "stored"
    before = await tools.snapshot()
    over = await store(tools, "over the cap", message={"metadata": {"k": "v" * 7992}})
    assert over == {
        "ok": False,
        "result": "rejected",
        "reason": "metadata too large (8001 chars, max 8000)",
    }
    # Non-ASCII is measured escaped (\\uXXXX = 6 characters each), as 2.5.x does.
    wide = await store(tools, "wide", message={"metadata": {"k": "あ" * 1400}})
    assert wide["result"] == "rejected" and wide["reason"].startswith("metadata too large (8409")
    assert await tools.snapshot() == before


async def test_source_cap_refuses_and_never_cuts(tools):
    ok = await store(tools, "at the cap", message={"source": "s" * 7998})
    assert ok["result"] == "stored"
    assert (await row(tools, ok["id"]))["source"] == "s" * 7998
    before = await tools.snapshot()
    over = await store(tools, "over", message={"source": {"type": "User", "id": "i" * 8000}})
    assert over["ok"] is False and over["result"] == "rejected"
    assert re.fullmatch(r"source too large \(\d+ chars, max 8000\)", over["reason"])
    assert set(over) == {"ok", "result", "reason"}
    assert await tools.snapshot() == before


async def test_metadata_cap_follows_the_setting(connect):
    async with connect(max_metadata_length=20) as tools:
        assert (await store(tools, "a", message={"metadata": {"k": "v" * 11}}))["ok"] is True
        out = await store(tools, "b", message={"metadata": {"k": "v" * 12}})
        assert out["reason"] == "metadata too large (21 chars, max 20)"


async def test_empty_content_wins_over_an_oversized_sidecar(tools):
    out = await store(tools, "", message={"metadata": {"k": "v" * 9000}})
    assert out["reason"] == "empty content"


# -- sanitising and the content cap --------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "stored"),
    [
        ("  padded\n", "padded"),
        ("[Memory from bob] hello", "hello"),
        ("before [Memory from bob, 2026-01-01]   after", "before after"),
        ("a [Memory from x]b [Memory from y]\nc", "a b c"),
        ("[Memory from ] stays", "[Memory from ] stays"),
        ("[memory from bob] case matters", "[memory from bob] case matters"),
        ("<@123> mentions are kept", "<@123> mentions are kept"),
        ("nul\x00inside", "nul\x00inside"),
    ],
)
async def test_sanitising(tools, raw, stored):
    if "\x00" in raw and not tools.engine.db.stores_nul:
        # PostgreSQL's text cannot hold U+0000: refused in the tool's shape, nothing stored.
        out = await store(tools, raw)
        assert (out["ok"], out["result"]) == (False, "rejected"), out
        assert "message.content (character 3)" in out["reason"] and "U+0000" in out["reason"]
        assert (await tools("list_memories", {"agent_id": "alice"}))["count"] == 0
        return
    out = await store(tools, raw)
    assert set(out) == STORED_KEYS, out
    assert (await row(tools, out["id"]))["content"] == stored


async def test_content_at_the_cap_is_not_truncated(tools):
    out = await store(tools, "a" * 16000)
    assert set(out) == STORED_KEYS
    assert len((await row(tools, out["id"]))["content"]) == 16000


async def test_content_over_the_cap_keeps_the_start(tools):
    text = "".join(f"{i:06d} " for i in range(2300))  # 16100 characters
    out = await store(tools, text)
    assert out["truncated"] is True and set(out) == STORED_KEYS | {"truncated"}
    assert (await row(tools, out["id"]))["content"] == text[:16000]


async def test_cap_counts_code_points_not_bytes(tools):
    out = await store(tools, "😀" * 16001)
    assert out["truncated"] is True
    assert (await row(tools, out["id"]))["content"] == "😀" * 16000


async def test_annotation_that_made_the_input_long_is_not_a_truncation(tools):
    out = await store(tools, "[Memory from bob] " + "b" * 16000)
    assert set(out) == STORED_KEYS
    assert (await row(tools, out["id"]))["content"] == "b" * 16000


async def test_one_megabyte_of_content_is_stored_cut_at_the_cap(tools):
    text = ("x" * 99 + " ") * 10_000  # 1,000,000 characters
    out = await store(tools, text)
    assert out["result"] == "stored" and out["truncated"] is True
    r = await row(tools, out["id"])
    assert r["content"] == text[:16000]


async def test_content_cap_follows_the_setting(connect):
    async with connect(max_content_length=5) as tools:
        out = await store(tools, "  abcdefgh  ")
        assert out["truncated"] is True
        assert (await row(tools, out["id"]))["content"] == "abcde"
        # The cut text is what the content probe compares.
        again = await store(tools, "abcdeXYZ")
        assert again == {
            "ok": True,
            "result": "skipped",
            "reason": "duplicate content",
            "id": out["id"],
        }


# -- source normalisation (surface.md §5.3) ------------------------------------------------------

_ABSENT = object()


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        (_ABSENT, {}),
        (None, {}),
        ({}, {}),
        ({"type": "User", "id": "u", "name": "n"}, {"type": "User", "id": "u", "name": "n"}),
        ({"type": "Agent", "id": "self"}, {"type": "Agent", "id": "self"}),
        ({"type": " user ", "id": "u"}, {"type": "User", "id": "u"}),
        ({"type": "AGENT"}, {"type": "Agent"}),
        ({"type": "assistant", "id": "a"}, {"type": "Agent", "id": "a"}),
        ({"type": "Ai"}, {"type": "Agent"}),
        ({"type": "system", "name": "cron"}, {"type": "System", "name": "cron"}),
        ({"type": "Session"}, {"type": "System"}),
        ({"type": "migration", "id": "m"}, {"type": "migration", "id": "m"}),
        ({"User": {"id": "u", "name": "n"}}, {"id": "u", "name": "n", "type": "User"}),
        ({"Agent": {}}, {"type": "Agent", "id": "", "name": ""}),
        ({"System": {"id": "s"}}, {"id": "s", "type": "System", "name": ""}),
        ({"User": "alice"}, {"type": "User", "id": "alice", "name": "alice"}),
        ({"Agent": "bot"}, {"type": "Agent", "id": "bot", "name": "bot"}),
        ({"System": "cron"}, {"type": "System", "id": "cron", "name": ""}),
        ({"user": "alice"}, {"user": "alice"}),
        ({"User": "a", "id": "x"}, {"User": "a", "id": "x"}),
        ({"User": 5}, {"User": 5}),
        ({"type": 5, "id": "x"}, {"type": 5, "id": "x"}),
        ("user", {"type": "User", "id": "", "name": ""}),
        (" Assistant ", {"type": "Agent", "id": "", "name": ""}),
        ("AI", {"type": "Agent", "id": "", "name": ""}),
        ("system", "system"),
        ("claude-code", "claude-code"),
        ("", ""),
    ],
)
async def test_source_normalisation(tools, given, expected):
    message: dict[str, Any] = {"content": f"source case {given!r}"}
    if given is not _ABSENT:
        message["source"] = given
    out = await tools("store", {"agent_id": "alice", "message": message})
    assert out["result"] == "stored"
    listed = (await row(tools, out["id"]))["source"]
    assert listed == expected
    stored = memory_sql.get(tools.engine.db.reader(), out["id"]).source
    assert stored == json.dumps(expected)


# -- dedup (surface.md §5.4) ---------------------------------------------------------------------


def skipped(reason: str, memory_id: int) -> dict:
    return {"ok": True, "result": "skipped", "reason": reason, "id": memory_id}


async def test_msg_id_dedup_ignores_the_channel_and_leaves_the_row_untouched(tools):
    first = await store(tools, "original", message={"id": "m1"}, channel="c1")
    before = await tools.snapshot()
    for channel in ("c1", "c2", ""):
        again = await store(tools, f"changed in {channel!r}", message={"id": "m1"}, channel=channel)
        assert again == skipped("duplicate msg_id", first["id"])
    assert await tools.snapshot() == before
    assert (await row(tools, first["id"]))["content"] == "original"


async def test_msg_id_is_per_agent(tools):
    a = await store(tools, "x", agent="alice", message={"id": "m1"})
    b = await store(tools, "y", agent="bob", message={"id": "m1"})
    assert a["result"] == b["result"] == "stored"


async def test_msg_id_dedup_wins_over_content_dedup(tools):
    first = await store(tools, "same", message={"id": "m1"})
    assert await store(tools, "same", message={"id": "m1"}) == skipped(
        "duplicate msg_id", first["id"]
    )
    # A different msg_id with the same content is a content duplicate.
    assert await store(tools, "same", message={"id": "m2"}) == skipped(
        "duplicate content", first["id"]
    )


async def test_msg_id_bucket_write_is_blocked_by_a_global_copy(tools):
    glob = await store(tools, "global", message={"id": "m1"})
    assert await store(tools, "in x", message={"id": "m1"}, project_id="x") == skipped(
        "duplicate msg_id", glob["id"]
    )


async def test_msg_id_global_write_is_not_blocked_by_a_bucket_copy(tools):
    in_x = await store(tools, "in x", message={"id": "m1"}, project_id="x")
    glob = await store(tools, "global", message={"id": "m1"})
    assert in_x["result"] == glob["result"] == "stored"
    in_y = await store(tools, "in y", message={"id": "m1"}, project_id="y")
    # Now the global copy blocks every bucket (the oldest match is echoed).
    assert in_y == skipped("duplicate msg_id", glob["id"])


async def test_content_dedup_is_exact_and_case_sensitive(tools):
    first = await store(tools, "Hello world")
    assert await store(tools, "  Hello world \n") == skipped("duplicate content", first["id"])
    assert await store(tools, "[Memory from x] Hello world") == skipped(
        "duplicate content", first["id"]
    )
    assert (await store(tools, "hello world"))["result"] == "stored"
    assert (await store(tools, "Hello world", agent="bob"))["result"] == "stored"


async def test_content_dedup_channel_scope(tools):
    in_c1 = await store(tools, "note", channel="c1")
    # Another channel is another scope.
    in_c2 = await store(tools, "note", channel="c2")
    assert in_c1["result"] == in_c2["result"] == "stored"
    # The channel-global write probes channel '' only, so it lands.
    glob = await store(tools, "note", channel="")
    assert glob["result"] == "stored"
    # A channel write is blocked by a channel-global copy.
    assert await store(tools, "note", channel="c3") == skipped("duplicate content", glob["id"])
    assert await store(tools, "note", channel="c1") == skipped("duplicate content", in_c1["id"])


async def test_content_dedup_project_scope_is_asymmetric(tools):
    in_x = await store(tools, "note", project_id="x")
    in_y = await store(tools, "note", project_id="y")
    glob = await store(tools, "note")
    assert {in_x["result"], in_y["result"], glob["result"]} == {"stored"}
    assert await store(tools, "note", project_id="z") == skipped("duplicate content", glob["id"])
    assert await store(tools, "note", project_id="x") == skipped("duplicate content", in_x["id"])
    assert await store(tools, "note") == skipped("duplicate content", glob["id"])


async def test_rejection_wins_over_dedup(tools):
    await store(tools, "kept", message={"id": "m1"})
    out = await store(tools, "", message={"id": "m1"})
    assert out == {"ok": False, "result": "rejected", "reason": "empty content"}


async def test_unique_index_absorbs_a_lost_race(tools, monkeypatch):
    first = await store(tools, "raced", message={"id": "r1"}, channel="c")
    before = await tools.snapshot()
    # Simulate the other writer landing between our probe and our insert: the probes see
    # nothing, the UNIQUE index sees the row.
    monkeypatch.setattr(memory_sql, "find_msg_id_duplicate", lambda *a: None)
    monkeypatch.setattr(memory_sql, "find_content_duplicate", lambda *a: None)
    out = await store(tools, "raced", message={"id": "r2"}, channel="c")
    assert out == {"ok": True, "result": "skipped", "reason": "duplicate (unique index)"}
    out = await store(tools, "other text", message={"id": "r1"}, channel="c")
    assert out == {"ok": True, "result": "skipped", "reason": "duplicate (unique index)"}
    assert await tools.snapshot() == before
    assert first["result"] == "stored"


# -- future timestamps (surface.md §5.5) ---------------------------------------------------------


def _ahead(seconds: float, tz: timedelta | None = timedelta(0)) -> str:
    instant = datetime.now(UTC) + timedelta(seconds=seconds)
    if tz is None:
        return instant.replace(tzinfo=None).isoformat()
    return instant.astimezone(__import__("datetime").timezone(tz)).isoformat()


async def test_future_timestamp_warns_by_default(tools):
    stamp = _ahead(3600)
    out = await store(tools, "from the future", message={"timestamp": stamp})
    assert set(out) == STORED_KEYS | {"timestamp_ahead_of_clock"}
    info = out["timestamp_ahead_of_clock"]
    assert set(info) == {"timestamp", "ahead_by_seconds", "allowance_seconds"}
    assert info["timestamp"] == stamp and info["allowance_seconds"] == 300
    assert 3500 < info["ahead_by_seconds"] <= 3600
    assert info["ahead_by_seconds"] == round(info["ahead_by_seconds"], 3)
    assert (await row(tools, out["id"]))["timestamp"] == stamp


# Made when the test runs, not at collection: parallel workers (pytest-xdist) must collect the
# same test ids, and a stamp made at collection would also age before its test ran.
@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda: _ahead(60), id="inside-the-allowance"),
        # wall-clock digits ahead, the instant is now
        pytest.param(lambda: _ahead(0, tz=timedelta(hours=9)), id="now-at-utc+9"),
        pytest.param(lambda: _ahead(-86400), id="yesterday"),
        pytest.param(lambda: "tomorrow", id="tomorrow"),
        pytest.param(lambda: "2026-13-45T99:00:00", id="2026-13-45T99:00:00"),
        # names an instant past year 9999: unparseable
        pytest.param(lambda: "9999-12-31T23:59:59-14:00", id="9999-12-31T23:59:59-14:00"),
    ],
)
async def test_timestamps_that_are_not_ahead(tools, make):
    stamp = make()
    out = await store(tools, f"stamp {stamp}", message={"timestamp": stamp})
    assert set(out) == STORED_KEYS, out
    assert (await row(tools, out["id"]))["timestamp"] == stamp


async def test_offsetless_and_zulu_stamps_read_as_utc(tools):
    naive = _ahead(3600, tz=None)
    zulu = _ahead(3600).replace("+00:00", "Z")
    for stamp in (naive, zulu):
        out = await store(tools, f"stamp {stamp}", message={"timestamp": stamp})
        assert "timestamp_ahead_of_clock" in out, stamp


async def test_future_timestamp_reject_mode(connect):
    async with connect(future_timestamp_mode="reject") as tools:
        await store(tools, "present", message={"id": "m1"})
        before = await tools.snapshot()
        stamp = _ahead(3600)
        # Rejection precedes the dedup probes: same msg_id and a future stamp is refused.
        out = await store(tools, "present", message={"id": "m1", "timestamp": stamp})
        assert set(out) == {"ok", "result", "reason"} and out["ok"] is False
        assert out["result"] == "rejected"
        pattern = r"timestamp '(.*)' is (\d+\.\d{3})s ahead of this clock \(allowance 300s\)"
        m = re.fullmatch(pattern, out["reason"])
        assert m and m.group(1) == stamp and 3500 < float(m.group(2)) <= 3600
        assert await tools.snapshot() == before
        assert set(await store(tools, "near", message={"timestamp": _ahead(60)})) == STORED_KEYS


async def test_future_timestamp_off_mode_stores_silently(connect):
    async with connect(future_timestamp_mode="off") as tools:
        out = await store(tools, "far", message={"timestamp": _ahead(10 * 86400)})
        assert set(out) == STORED_KEYS


async def test_future_timestamp_allowance_follows_the_setting(connect):
    async with connect(future_timestamp_skew_seconds=0) as tools:
        out = await store(tools, "soon", message={"timestamp": _ahead(30)})
        assert out["timestamp_ahead_of_clock"]["allowance_seconds"] == 0
