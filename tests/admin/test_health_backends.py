"""check_health on both storage backends (issue 12): the checks whose subject exists only in
an SQLite database say `not_applicable` on PostgreSQL instead of passing silently, and every
other check judges the same rows the same way."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from cpersona.embedding.hashing import HashingProvider

SQLITE_ONLY = {
    "fts_integrity",
    "dedup_msg_id_index",
    "schema_objects",
    "sqlite_integrity",
    "vector_index",
}

pytestmark = pytest.mark.anyio


def _not_applicable(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {i["check"]: i for i in report["issues"] if i.get("status") == "not_applicable"}


@pytest.mark.parametrize("fix", [False, True])
async def test_sqlite_only_checks_are_not_applicable_on_postgresql(
    connect: Any, store_backend: str, fix: bool
) -> None:
    async with connect() as tools:
        stored = await tools("store", {"agent_id": "a", "message": {"content": "kept row"}})
        assert stored["result"] == "stored"
        report = await tools("check_health", {"fix": fix})
    marked = _not_applicable(report)
    if store_backend == "sqlite":
        assert marked == {}
    else:
        assert set(marked) == SQLITE_ONLY
        for name, found in marked.items():
            assert found["type"] == f"{name}_not_applicable"
            assert found["severity"] == "info"
            assert found["reason"]
    # Not applicable is said, never counted against the database.
    assert report["status"] == "healthy"
    assert report["fixed"] is fix
    assert set(report["checks_run"]) >= SQLITE_ONLY
    assert report["stats"]["memories"] == 1
    assert report["stats"]["db_size_bytes"] > 0
    assert not [i for i in report["issues"] if i["type"] == "check_crashed"]


async def test_one_requested_sqlite_check_on_postgresql(connect: Any, store_backend: str) -> None:
    async with connect() as tools:
        report = await tools("check_health", {"checks": ["sqlite_integrity"]})
    assert report["checks_run"] == ["sqlite_integrity"]
    if store_backend == "sqlite":
        assert report["issues"] == []
    else:
        assert [i["type"] for i in report["issues"]] == ["sqlite_integrity_not_applicable"]
    assert report["severity_summary"] == {"critical": 0, "warn": 0, "info": len(report["issues"])}


async def test_data_checks_find_and_repair_the_same_rows(connect: Any, store_backend: str) -> None:
    async with connect() as tools:
        stored = await tools("store", {"agent_id": "a", "message": {"content": "broken json"}})
        with tools.engine.db.atomic() as conn:  # damage no tool can write
            conn.execute("UPDATE memories SET metadata = '{oops' WHERE id = ?", (stored["id"],))
        found = await tools("check_health", {"checks": ["invalid_json"]})
        fixed = await tools("check_health", {"checks": ["invalid_json"], "fix": True})
        after = await tools("check_health", {"checks": ["invalid_json"]})
    (issue,) = found["issues"]
    assert issue["type"] == "invalid_json" and issue["count"] == 1
    assert found["status"] == "degraded"
    assert fixed["issues"][0]["fixed"] == 1
    assert after["issues"] == [] and after["status"] == "healthy"


async def test_fix_run_re_embeds_rows_without_a_vector(connect: Any, store_backend: str) -> None:
    async with connect() as tools:
        stored = await tools("store", {"agent_id": "a", "message": {"content": "vector lost"}})
        assert stored["embedded"] is True
        with tools.engine.db.atomic() as conn:
            conn.execute("UPDATE memories SET embedding = NULL WHERE id = ?", (stored["id"],))
        before = await tools("check_health", {"checks": ["null_embedding"]})
        fixed = await tools("check_health", {"checks": ["null_embedding"], "fix": True})
        after = await tools("check_health", {"checks": ["null_embedding"]})
        row = tools.engine.db.query_one(
            "SELECT embedding FROM memories WHERE id = ?", (stored["id"],)
        )
    assert [i["count"] for i in before["issues"]] == [1]
    assert fixed["issues"][0]["fixed"] == 1
    assert after["issues"] == []
    # The repaired row holds this model's vector of its text, on either backend.
    expected = np.asarray(HashingProvider().embed(["vector lost"], kind="passage"), "<f4")
    assert row is not None and bytes(row[0]) == expected.reshape(-1).tobytes()
