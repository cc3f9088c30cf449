"""pause_persistence / resume_persistence / persistence_status (surface.md §10.1, §10.2)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest

pytestmark = pytest.mark.anyio


class FakeClock:
    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now


def _store(key: str = "", content: str = "hello there") -> dict[str, Any]:
    return {"agent_id": "a", "message": {"content": content}, "session_key": key}


async def test_pause_shapes_and_scope(tools: Any) -> None:
    clock = FakeClock()
    tools.engine.pause.clock = clock
    out = await tools("pause_persistence", {"ttl_seconds": 120, "session_key": "s1"})
    assert set(out) == {"paused", "expires_at", "ttl_seconds", "scope"}
    assert out["paused"] is True and out["ttl_seconds"] == 120 and out["scope"] == "session"
    assert datetime.fromisoformat(out["expires_at"]).timestamp() == clock.now + 120
    status = await tools("persistence_status", {"session_key": "s1"})
    assert status == {
        "paused": True,
        "expires_at": out["expires_at"],
        "ttl_remaining_seconds": 120,
        "scope": "session",
    }
    keyless = await tools("persistence_status")
    assert keyless == {
        "paused": False,
        "expires_at": None,
        "ttl_remaining_seconds": None,
        "scope": "process",
    }
    assert await tools("resume_persistence", {"session_key": "s1"}) == {
        "paused": False,
        "was_active": True,
        "scope": "session",
    }
    assert await tools("resume_persistence", {"session_key": "s1"}) == {
        "paused": False,
        "was_active": False,
        "scope": "session",
    }


async def test_pause_default_ttl_and_schema_bounds(tools: Any) -> None:
    out = await tools("pause_persistence")
    assert out["ttl_seconds"] == 1800 and out["scope"] == "process"
    assert (await tools("pause_persistence", {"ttl_seconds": 86400}))["ttl_seconds"] == 86400
    for bad in (86401, 0, -5):
        result = await tools.raw("pause_persistence", {"ttl_seconds": bad})
        assert result.is_error
        assert result.content[0].text.startswith("Input validation error")


async def test_pause_ttl_expires_lazily(tools: Any) -> None:
    clock = FakeClock()
    tools.engine.pause.clock = clock
    await tools("pause_persistence", {"ttl_seconds": 90})
    clock.now += 29.5
    assert (await tools("persistence_status"))["ttl_remaining_seconds"] == 60  # floored
    skipped = await tools("store", _store())
    assert "(1m left)" in skipped["reason"]
    clock.now += 1
    skipped = await tools("store", _store())
    assert "(59s left)" in skipped["reason"]  # under a minute: seconds
    clock.now += 60
    assert (await tools("persistence_status"))["paused"] is False
    assert (await tools("store", _store()))["result"] == "stored"


async def test_pause_repause_replaces_deadline(tools: Any) -> None:
    clock = FakeClock()
    tools.engine.pause.clock = clock
    await tools("pause_persistence", {"ttl_seconds": 3600})
    await tools("pause_persistence", {"ttl_seconds": 10})
    assert (await tools("persistence_status"))["ttl_remaining_seconds"] == 10
    clock.now += 11
    assert (await tools("persistence_status"))["paused"] is False


async def test_pause_buckets_are_per_session_key(tools: Any) -> None:
    await tools("pause_persistence", {"session_key": "  alpha  "})
    assert (await tools("persistence_status", {"session_key": "alpha"}))["paused"] is True
    assert (await tools("store", _store("alpha", "one")))["persisted"] is False
    assert (await tools("store", _store("beta", "two")))["result"] == "stored"
    assert (await tools("store", _store("", "three")))["result"] == "stored"
    # Undeclared callers ("", blanks, the literal `transport`) share the process bucket.
    await tools("pause_persistence", {"session_key": "   "})
    for key in ("", "transport", " "):
        assert (await tools("persistence_status", {"session_key": key}))["scope"] == "process"
        assert (await tools("store", _store(key, f"four{key!r}")))["persisted"] is False
    assert (await tools("store", _store("beta", "five")))["result"] == "stored"
    assert (await tools("resume_persistence", {"session_key": "transport"}))["was_active"]
    assert (await tools("store", _store("", "six")))["result"] == "stored"
    assert (await tools("persistence_status", {"session_key": "alpha"}))["paused"] is True


async def test_pause_live_pauses_are_capped(tools: Any) -> None:
    for i in range(256):
        assert (await tools("pause_persistence", {"session_key": f"k{i}"}))["paused"]
    refused = await tools("pause_persistence", {"session_key": "one-too-many"})
    assert refused["ok"] is False
    assert refused["error"].startswith("persistence was NOT paused: 256 sessions")
    # Re-pausing a key that holds a pause is no new pause, and nobody was evicted.
    assert (await tools("pause_persistence", {"session_key": "k0"}))["paused"]
    assert (await tools("persistence_status", {"session_key": "k255"}))["paused"]


async def test_pause_is_not_persisted_across_restart(connect: Any) -> None:
    async with connect() as first:
        await first("pause_persistence", {"ttl_seconds": 600})
    async with connect() as second:
        assert (await second("persistence_status"))["paused"] is False


async def test_pause_of_a_declared_key_is_every_servers_on_a_shared_database(
    connect: Any, store_backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two servers on one database, the second host's clock an hour off either way: on
    PostgreSQL the pause lives in the database and is measured by its clock, so the second
    server answers the first's deadline, whatever its own clock says; on SQLite a pause stays
    the process's own (surface.md §10.2)."""
    import cpersona.session

    shared = store_backend == "postgresql"
    async with connect() as a, connect() as b:
        taken = await a("pause_persistence", {"session_key": "k", "ttl_seconds": 600})
        real = cpersona.session.time.time
        for skew in (3600.0, -3600.0):
            monkeypatch.setattr(cpersona.session.time, "time", lambda s=skew: real() + s)
            seen = await b("persistence_status", {"session_key": "k"})
            monkeypatch.undo()
            assert seen["paused"] is shared
            if shared:
                assert seen["expires_at"] == taken["expires_at"]
                assert 0 < seen["ttl_remaining_seconds"] <= 600
        stored = await b("store", _store("k", "written on the second server"))
        assert stored["result"] == ("skipped" if shared else "stored")
        assert (await b("resume_persistence", {"session_key": "k"}))["was_active"] is shared
        assert (await a("persistence_status", {"session_key": "k"}))["paused"] is not shared
