"""The health checks speak each store_backend's own SQL (issue 18): on PostgreSQL no statement they
send needs the SQLite emulation (storage/pg/legacy.py), and the time and JSON checks find and
repair the same rows on both backends."""

from __future__ import annotations

import re
from typing import Any

import pytest
from cpersona.storage.upkeep.handle import Handle
from health_support import of, plant, rows

pytestmark = pytest.mark.anyio

SQLITE_CALL = re.compile(
    r"\b(julianday|strftime|datetime|json_extract|json_valid|json_type|instr|ifnull|total"
    r"|sqlite_\w+)\s*\(",
    re.IGNORECASE,
)


async def test_time_and_json_checks_in_native_sql(
    connect: Any, store_backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    sent: list[str] = []
    execute = Handle.execute

    def recording(self: Handle, sql: str, params: Any = ()) -> Any:
        sent.append(sql)
        return execute(self, sql, params)

    monkeypatch.setattr(Handle, "execute", recording)
    async with connect() as tools:
        ids = []
        for text in ("ahead", "lost", "typed", "anonymous", "plain"):
            stored = await tools("store", {"agent_id": "a", "message": {"content": text}})
            ids.append(stored["id"])
        plant(
            tools.engine,  # damage no tool writes, in SQL both backends run
            ("UPDATE memories SET timestamp = '2999-01-01T00:00:00+00:00' WHERE id = ?", (ids[0],)),
            ("UPDATE memories SET timestamp = 'last tuesday' WHERE id = ?", (ids[1],)),
            ("UPDATE memories SET source = ? WHERE id = ?", ('{"type": "user"}', ids[2])),
            (
                "UPDATE memories SET source = ? WHERE id = ?",
                ('{"type": "User", "id": "", "name": ""}', ids[3]),
            ),
            ("UPDATE memories SET metadata = '{oops' WHERE id = ?", (ids[4],)),
            "INSERT INTO pending_memory_tasks(task_type, agent_id, payload, created_at) "
            "VALUES ('update_profile', 'a', '{}', '2000-01-01 00:00:00')",
            "INSERT INTO episodes(agent_id, summary, start_time, end_time) "
            "VALUES ('a', 'a trip', '2001-01-01T00:00:00+00:00', '2001-01-02T00:00:00+00:00')",
            "INSERT INTO episodes(agent_id, summary, start_time) VALUES ('a', 'no start', '')",
        )
        report = await tools("check_health")
        counts = {c: [i.get("count") for i in of(report, c)] for c in (
            "future_timestamp", "invalid_timestamp", "stale_pending_tasks",
            "invalid_source_type", "anonymous_source", "invalid_json",
            "missing_episode_start_time",
        )}  # fmt: skip
        assert counts == {
            "future_timestamp": [1],
            "invalid_timestamp": [1],
            "stale_pending_tasks": [1],
            "invalid_source_type": [1],
            "anonymous_source": [1],
            "invalid_json": [1],
            "missing_episode_start_time": [1],
        }, report["issues"]
        fixed = await tools("check_health", {"fix": True})
        for check in counts:
            for i in of(fixed, check):
                if i.get("repairable"):
                    assert i["fixed"] == 1 and "fix_error" not in i, i
        deep = await tools("deep_check", {"agent_id": "a"})
        after = await tools("check_health")
        stamps = dict(rows(tools.engine, "SELECT id, timestamp FROM memories"))
    assert deep["results"]["orphaned_episodes"]["count"] == 1
    # The planted sentinel, and the "user" source the fix mapped to a User without a name.
    assert deep["results"]["anonymous_source"]["unrecoverable"] == 2
    assert deep["results"]["stale_profile"]["count"] == 0
    # Both stamps came from created_at, written in the canonical UTC form.
    assert stamps[ids[0]].endswith("+00:00") and not stamps[ids[0]].startswith("2999")
    assert stamps[ids[1]].endswith("+00:00") and "T" in stamps[ids[1]]
    for check in ("future_timestamp", "invalid_timestamp", "stale_pending_tasks", "invalid_json"):
        assert not of(after, check), of(after, check)
    assert sent, "the checks read through their handle"
    if store_backend == "postgresql":
        # PostgreSQL has none of SQLite's functions (tests/pg/test_pg_schema_native.py): a
        # statement calling one would have failed above; none is even spelled.
        assert [s for s in sent if SQLITE_CALL.search(s)] == []
