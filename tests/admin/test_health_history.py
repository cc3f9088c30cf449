"""check_health fits its backend and the store's history (issue 21 items 5 and 3).

On PostgreSQL the SQLite data directory may not exist at all (the database is elsewhere): no
check crashes on that, and a healthy database is healthy. A store that CPersona 2.6.14 has
upgraded (schema version 21, newer than cpersona's 13) is served as it is; its newer schema is
information, and its verdict is the verdict of the same content written by 2.5.12. Vectors
that are not the configured model's embedding of their row's text are found by a report-only
run, not only by fix=true.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from cpersona.embedding.hashing import HashingProvider
from cpersona.storage.db import embedding_param

pytestmark = pytest.mark.anyio

FIXTURES = Path("/work/shared/fixtures")
#: The checks whose subject is the store's schema and files, not its rows' content.
SCHEMA_CHECKS = [
    "schema_version",
    "schema_objects",
    "dedup_msg_id_index",
    "sqlite_integrity",
    "fts_integrity",
    "file_permissions",
    "vector_index",
]


@pytest.mark.parametrize("fix", [False, True])
async def test_healthy_database_without_its_data_directory_is_healthy(
    connect: Any, store_backend: str, tmp_path: Path, fix: bool
) -> None:
    # On PostgreSQL nothing creates the SQLite path's directory (the cause of the crash).
    where = tmp_path / "never-made" / "memory.db"
    async with connect(db_path=str(where)) as tools:
        stored = await tools("store", {"agent_id": "a", "message": {"content": "a kept row"}})
        assert stored["result"] == "stored"
        await tools("update_profile", {"agent_id": "a", "profile": "likes tea"})
        report = await tools("check_health", {"fix": fix})
    assert not [i for i in report["issues"] if i["type"] == "check_crashed"], report["issues"]
    assert report["status"] == "healthy", report["issues"]
    assert "file_permissions" in report["checks_run"]
    if store_backend == "postgresql":
        assert not where.parent.exists()


def copy_fixture(version: str, tmp_path: Path) -> Path:
    db = tmp_path / version / "memory.db"
    db.parent.mkdir(mode=0o700)
    shutil.copy(FIXTURES / f"cpersona-{version}-sample.db", db)
    os.chmod(db, 0o600)  # the copy's mode is the test's, not the file's history
    return db


@pytest.mark.parametrize("store_backend", ["sqlite"])  # the fixtures are SQLite files
async def test_a_store_upgraded_by_2_6_14_is_judged_as_its_2_5_12_twin(
    connect: Any, tmp_path: Path
) -> None:
    reports = {}
    for version in ("2.5.12", "2.6.14"):
        async with connect(db_path=str(copy_fixture(version, tmp_path))) as tools:
            listed = await tools("list_memories", {"agent_id": "alice", "limit": 100})
            assert len(listed["memories"]) == 39
            reports[version] = await tools("check_health", {})
            schema_only = await tools("check_health", {"checks": SCHEMA_CHECKS})
        assert schema_only["status"] == "healthy", (version, schema_only["issues"])
        assert schema_only["severity_summary"]["critical"] == 0
    old, new = reports["2.5.12"], reports["2.6.14"]
    newer = [i for i in new["issues"] if i["check"] == "schema_version"]
    assert [(i["type"], i["severity"], i["found"]) for i in newer] == [
        ("schema_version_newer", "info", 21)
    ]
    assert not [i for i in old["issues"] if i["check"] == "schema_version"]
    assert new["status"] == old["status"]
    assert new["severity_summary"]["critical"] == old["severity_summary"]["critical"] == 0

    def findings(report: dict[str, Any]) -> list[tuple[str, str]]:
        return sorted(
            (i["type"], i["severity"]) for i in report["issues"] if i["check"] != "schema_version"
        )

    assert findings(new) == findings(old)


async def test_foreign_vectors_are_reported_without_fix_and_re_embedded_with_it(
    connect: Any, store_backend: str
) -> None:
    async with connect() as tools:
        ids = []
        for i in range(12):
            out = await tools("store", {"agent_id": "a", "message": {"content": f"note {i}"}})
            ids.append(out["id"])
        # What an import of another model's export left before issue 21: same width, another
        # phrase's vector.
        foreign = HashingProvider().embed(["purple elephants"])[0].astype("<f4").tobytes()
        with tools.engine.db.atomic() as conn:
            for row_id in ids[-2:]:
                conn.execute(
                    "UPDATE memories SET embedding = ? WHERE id = ?",
                    (embedding_param(conn, foreign), row_id),
                )
        report = await tools("check_health", {"checks": ["embedding_model"]})
        (found,) = report["issues"]
        assert found["type"] == "embedding_model_foreign_rows" and found["severity"] == "warn"
        assert set(found["rows"]) == {"memories"}
        assert sorted(found["rows"]["memories"]) == sorted(ids[-2:])
        assert report["status"] == "degraded"
        fixed = await tools("check_health", {"checks": ["embedding_model"], "fix": True})
        assert fixed["issues"][0]["fixed"] == 2 and fixed["issues"][0]["re_embedded"] == 2
        after = await tools("check_health", {"checks": ["embedding_model"]})
        assert after["issues"] == [] and after["status"] == "healthy"
