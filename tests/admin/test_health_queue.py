"""get_queue_status and the drain-only legacy task queue (surface.md §9.6)."""

from __future__ import annotations

from typing import Any

import pytest
from health_support import plant, rows

pytestmark = pytest.mark.anyio

TASKS = (
    "INSERT INTO pending_memory_tasks(task_type, agent_id, payload) VALUES "
    "('update_profile', 'a', '{\"profile\": \"likes rain\"}'), "
    "('archive_episode', 'a', '{\"history\": []}'), "
    "('mystery', 'a', '{}'), "
    "('update_profile', 'b', 'not json'), "
    "('update_profile', 'c', '{\"profile\": \"   \"}')"
)


def _drain(tools: Any) -> None:
    thread = tools.engine.tasks.start()
    assert thread is not None
    thread.join(timeout=30)
    assert not thread.is_alive()


async def test_queue_status_empty_is_normal(tools: Any) -> None:
    assert await tools("get_queue_status") == {
        "enabled": True,
        "pending": 0,
        "max_retries": 3,
        "retry_delay": 30,
    }


async def test_queue_drains_legacy_rows(connect: Any) -> None:
    async with connect(task_retry_delay=0, task_max_retries=2) as tools:
        plant(tools.engine, TASKS)
        assert (await tools("get_queue_status"))["pending"] == 5
        _drain(tools)
        assert await tools("get_queue_status") == {
            "enabled": True,
            "pending": 0,
            "max_retries": 2,
            "retry_delay": 0,
        }
        assert (await tools("get_profile", {"agent_id": "a"})) == {"profile": "likes rain"}
        assert (await tools("get_profile", {"agent_id": "c"})) == {"profile": ""}
        assert (await tools("list_episodes", {}))["count"] == 0


async def test_queue_discards_while_keyless_bucket_paused(tools: Any) -> None:
    plant(tools.engine, TASKS)
    await tools("pause_persistence", {})
    _drain(tools)
    assert rows(tools.engine, "SELECT COUNT(*) FROM pending_memory_tasks") == [(0,)]
    assert rows(tools.engine, "SELECT COUNT(*) FROM profiles") == [(0,)]


async def test_queue_disabled_reports_zero_and_never_drains(connect: Any) -> None:
    async with connect(task_queue_enabled=False) as tools:
        plant(tools.engine, TASKS)
        assert await tools("get_queue_status") == {
            "enabled": False,
            "pending": 0,
            "max_retries": 3,
            "retry_delay": 30,
        }
        assert tools.engine.tasks.start() is None
        assert rows(tools.engine, "SELECT COUNT(*) FROM pending_memory_tasks") == [(5,)]
