"""check_health(fix=true) repairs each defect it claims to repair; a second run is healthy.

Each test plants one defect behind the server's back, sees the report find it with its
severity and verdict, runs the fix, checks the data itself, and runs the report again.
"""

from __future__ import annotations

import os
import struct
from typing import Any

import numpy as np
import pytest
from cpersona.vectors.format import HEADER_DTYPE, HEADER_LEN, Layout
from health_support import corpus, hours_ago, of, plant, planted, rows

pytestmark = pytest.mark.anyio


#: Tests that plant damage only an SQLite database can hold (FTS5 tables, sqlite_master
#: objects, index files, raw BLOBs where PostgreSQL has a `vector` column, SQLite-only SQL
#: such as zeroblob() or printf()); the checks they exercise are either not applicable on
#: PostgreSQL (test_health_backends.py) or are run there by the other tests of this file.
SQLITE_DAMAGE = {
    "test_health_duplicate_rows": "drops an SQLite UNIQUE index and reads sqlite_master",
    "test_health_broken_fts_index": "damages FTS5 tables",
    "test_health_oversized_row_is_cut": "plants with SQLite's zeroblob()/printf()",
    "test_health_corrupt_vector_index_file": "damages a local vector index file",
    "test_health_wrong_width_embedding": "writes a raw BLOB into the embedding column",
    "test_health_nonfinite_embedding": "writes a raw BLOB into the embedding column",
    "test_health_missing_msg_id_index": "drops an SQLite index (sqlite_master)",
    "test_health_drifted_and_missing_perf_index": "rewrites SQLite index DDL",
    "test_health_profile_timestamps_and_permissions": "plants with SQLite's printf()",
    "test_health_embedding_model_mismatch_re_embeds": "writes raw BLOBs of another model",
    "test_health_embedding_model_label_of_sidecar": "writes raw BLOBs of another model",
    "test_health_permissions_cover_the_full_text_files": "loosens the index files beside it",
}


@pytest.fixture(autouse=True)
def _sqlite_damage(store_backend: str, request: pytest.FixtureRequest) -> None:
    why = SQLITE_DAMAGE.get(request.node.originalname)
    if store_backend == "postgresql" and why is not None:
        pytest.skip(f"SQLite-only damage: {why}")


async def cycle(
    tools: Any, check: str, *, status: str, finding: str | None = None, severity: str | None = None
) -> dict[str, Any]:
    """Report (finds it) -> fix (repairs it, residual healthy) -> report (healthy)."""
    report = await tools("check_health")
    found = of(report, check)
    assert found, report["issues"]
    if finding is not None:
        assert finding in {i["type"] for i in found}
    if severity is not None:
        assert severity in {i["severity"] for i in found}
    assert report["status"] == status, report["issues"]
    fixed = await tools("check_health", {"fix": True})
    assert fixed["fixed"] is True
    for i in of(fixed, check):
        if i.get("repairable"):
            assert i.get("fixed") not in (None, False, 0), i
            assert "fix_error" not in i, i
    assert fixed["status"] == "healthy", fixed["issues"]
    after = await tools("check_health")
    assert after["status"] == "healthy", after["issues"]
    assert all(i["severity"] == "info" for i in of(after, check)), of(after, check)
    return fixed


async def test_health_clean_database_is_healthy(tools: Any) -> None:
    await corpus(tools)
    report = await tools("check_health")
    assert "ok" not in report
    assert report["status"] == "healthy"
    assert report["severity_summary"]["critical"] == report["severity_summary"]["warn"] == 0
    assert report["checks_run"][0] == "memory_annotation"
    assert report["checks_run"][31:] == [
        "file_permissions",
        "embedding_model",
        "stored_credentials",
    ]
    assert report["total_memories"] == 6
    assert report["stats"]["memories"] == 6 and report["stats"]["profiles"] == 1
    assert report["stats"]["axes"]["project_id"] == {"(global)": 6}


async def test_health_duplicate_rows(tools: Any) -> None:
    ids = await corpus(tools)
    text = rows(tools.engine, "SELECT content FROM memories WHERE id = ?", (ids[0],))[0][0]
    plant(
        tools.engine,
        "DROP INDEX idx_memories_dedup_content",
        ("INSERT INTO memories(agent_id, content, timestamp) VALUES ('a', ?, 'now')", (text,)),
        (
            "INSERT INTO memories(agent_id, content, timestamp, channel) "
            "VALUES ('a', ?, 'now', 'x')",
            (text,),
        ),
    )
    report = await tools("check_health")
    dup = of(report, "duplicate_content")[0]
    assert (dup["groups"], dup["total_extra"], dup["repairable"]) == (1, 2, 2)
    assert of(report, "schema_objects")[0]["type"] == "schema_object_missing"
    await cycle(tools, "duplicate_content", status="unhealthy")
    # The survivor is the lowest id in the channel-global bucket; the index is back.
    assert rows(tools.engine, "SELECT id FROM memories WHERE content = ?", (text,)) == [(ids[0],)]
    assert rows(
        tools.engine, "SELECT name FROM sqlite_master WHERE name = 'idx_memories_dedup_content'"
    )


async def test_health_locked_duplicate_is_respected(tools: Any) -> None:
    ids = await corpus(tools)
    text = rows(tools.engine, "SELECT content FROM memories WHERE id = ?", (ids[0],))[0][0]
    plant(
        tools.engine,
        (
            "INSERT INTO memories(agent_id, content, timestamp, channel, locked) "
            "VALUES ('a', ?, 'now', 'x', 1)",
            (text,),
        ),
    )
    report = await tools("check_health", {"fix": True})
    dup = of(report, "duplicate_content")[0]
    assert dup["repairable"] == 0 and dup["needs_human_review"] and dup["severity"] == "info"
    assert report["status"] == "healthy"
    assert len(rows(tools.engine, "SELECT id FROM memories WHERE content = ?", (text,))) == 2


@pytest.mark.parametrize(
    "damage",
    [
        "INSERT INTO memories_fts(memories_fts) VALUES ('delete-all')",
        "DELETE FROM memories_fts_data WHERE id > 1",
    ],
    ids=["delete-all", "data-rows-deleted"],
)
async def test_health_broken_fts_index(tools: Any, damage: str) -> None:
    await planted(tools, damage)
    await cycle(tools, "fts_integrity", status="unhealthy", severity="critical")
    hits = rows(tools.engine, "SELECT rowid FROM memories_fts WHERE memories_fts MATCH 'platform'")
    assert len(hits) == 6
    recalled = await tools("recall", {"agent_id": "a", "query": "platform 3"})
    assert any("platform 3" in m["content"] for m in recalled["messages"])


async def test_health_missing_embeddings_are_re_embedded(tools: Any) -> None:
    ids = await corpus(tools)
    before = dict(rows(tools.engine, "SELECT id, embedding FROM memories"))
    plant(
        tools.engine,
        f"UPDATE memories SET embedding = NULL WHERE id IN ({ids[1]}, {ids[4]})",
        "UPDATE episodes SET embedding = NULL",
    )
    fixed = await cycle(tools, "null_embedding", status="degraded", severity="warn")
    issue = of(fixed, "null_embedding")[0]
    assert (issue["count"], issue["re_embedded"], issue["remaining"]) == (2, 2, 0)
    assert dict(rows(tools.engine, "SELECT id, embedding FROM memories")) == before


async def test_health_mostly_null_embeddings_are_critical(tools: Any) -> None:
    await planted(tools, "UPDATE memories SET embedding = NULL WHERE id > 1")
    await cycle(tools, "null_embedding", status="unhealthy", severity="critical")


async def test_health_reembed_cap_leaves_the_rest(connect: Any) -> None:
    async with connect(reembed_row_cap=2) as tools:
        await planted(tools, "UPDATE memories SET embedding = NULL")
        fixed = await tools("check_health", {"fix": True, "checks": ["null_embedding"]})
        issue = of(fixed, "null_embedding")[0]
        assert (issue["re_embedded"], issue["remaining"]) == (2, 4)
        assert fixed["status"] == "unhealthy"  # 4 of 6 still without vectors


async def test_health_null_embeddings_without_backend_are_info(connect: Any) -> None:
    async with connect() as tools:
        await corpus(tools)
        tools.engine.embedder.available = False  # as the `none` provider
        plant(tools.engine, "UPDATE memories SET embedding = NULL")
        report = await tools("check_health")
        issue = of(report, "null_embedding")[0]
        assert issue["severity"] == "info" and issue["needs_human_review"]
        assert report["status"] == "healthy"


async def test_health_oversized_row_is_cut(connect: Any) -> None:
    async with connect(max_content_length=100) as tools:
        ids = await planted(
            tools,
            "UPDATE memories SET content = content || printf('%.200c', 'x') WHERE id = {0}",
            "UPDATE memories SET content = content || printf('%.300c', 'y'), locked = 1 "
            "WHERE id = {1}",
            n=3,
        )
        report = await tools("check_health")
        issue = of(report, "oversized_content")[0]
        assert (issue["count"], issue["repairable"], issue["locked"]) == (2, 1, 1)
        assert issue["max_len"] > 300
        fixed = await cycle(tools, "oversized_content", status="degraded")
        assert of(fixed, "oversized_content")[0]["re_embedded"] == 1
        lengths = dict(rows(tools.engine, "SELECT id, length(content) FROM memories"))
        assert lengths[ids[0]] == 100 and lengths[ids[1]] > 300  # the locked row is kept
        embedded = rows(
            tools.engine, "SELECT embedding IS NOT NULL FROM memories WHERE id = ?", (ids[0],)
        )
        assert embedded == [(1,)]


async def test_health_stale_pending_task(tools: Any) -> None:
    await corpus(tools)
    plant(
        tools.engine,
        "INSERT INTO pending_memory_tasks(task_type, agent_id, payload, created_at) "
        f"VALUES ('update_profile', 'a', '{{}}', '{hours_ago(2)}')",
        "INSERT INTO pending_memory_tasks(task_type, agent_id, payload) "
        "VALUES ('update_profile', 'a', '{}')",
    )
    fixed = await cycle(tools, "stale_pending_tasks", status="degraded")
    assert of(fixed, "stale_pending_tasks")[0]["fixed"] == 1
    assert len(rows(tools.engine, "SELECT id FROM pending_memory_tasks")) == 1  # the fresh one


@pytest.mark.parametrize("how", ["vector-bytes", "truncated", "garbage-header"])
async def test_health_corrupt_vector_index_file(tools: Any, how: str) -> None:
    await corpus(tools)
    path = tools.engine.indexes["memories"].path
    size = path.stat().st_size
    with open(path, "r+b") as f:
        if how == "vector-bytes":
            # Overwrite the first component of slot 0's vector (a live row).
            header = np.frombuffer(f.read(HEADER_LEN), dtype=HEADER_DTYPE)[0]
            layout = Layout.of(int(header["dim"]), int(header["capacity"]))
            f.seek(layout.offsets["vectors"])
            f.write(struct.pack("<f", 12345.0))
        elif how == "truncated":
            f.truncate(size // 2)
        else:
            f.write(b"\x00garbage" * 8)
    report = await tools("check_health")
    issue = of(report, "vector_index")[0]
    assert issue["severity"] == "warn"
    assert issue["type"] == (
        "vector_index_mismatch" if how == "vector-bytes" else "vector_index_unusable"
    )
    await cycle(tools, "vector_index", status="degraded")
    assert tools.engine.indexes["memories"].verify() == []


async def test_health_wrong_width_embedding(tools: Any) -> None:
    await planted(tools, "UPDATE memories SET embedding = zeroblob(64) WHERE id = {2}")
    fixed = await cycle(tools, "embedding_dimension", status="unhealthy", severity="critical")
    assert of(fixed, "embedding_dimension")[0]["re_embedded"] == 1
    widths = {
        r[0]
        for r in rows(
            tools.engine,
            f"SELECT {tools.engine.db.ops.byte_length('embedding')} FROM memories",
        )
    }
    assert widths == {384 * 4}


async def test_health_nonfinite_embedding(tools: Any) -> None:
    ids = await corpus(tools)
    blob = np.full(384, np.nan, dtype="<f4").tobytes()
    plant(tools.engine, ("UPDATE memories SET embedding = ? WHERE id = ?", (blob, ids[3])))
    await cycle(tools, "nonfinite_embedding", status="degraded")
    stored = rows(tools.engine, "SELECT embedding FROM memories WHERE id = ?", (ids[3],))[0][0]
    assert np.all(np.isfinite(np.frombuffer(stored, "<f4")))


async def test_health_annotation_and_mention_rewrites(tools: Any) -> None:
    ids = await planted(
        tools,
        "UPDATE memories SET content = '[Memory from 2024] trains run late' WHERE id = {0}",
        "UPDATE memories SET content = 'ping <@123> about <@!456> trains' WHERE id = {1}",
    )
    # Only these two: the planted texts no longer match their vectors, which embedding_model
    # reports (embedding_model_foreign_rows), and that is not what this test is about.
    report = await tools("check_health", {"checks": ["memory_annotation", "discord_mention"]})
    assert of(report, "memory_annotation")[0]["severity"] == "info"
    assert report["status"] == "healthy"  # info never degrades
    await tools("check_health", {"fix": True})
    texts = dict(rows(tools.engine, "SELECT id, content FROM memories"))
    assert texts[ids[0]] == "trains run late"
    assert texts[ids[1]] == "ping about trains"
    after = await tools("check_health")
    assert not of(after, "memory_annotation") and not of(after, "discord_mention")


async def test_health_invalid_json_and_empty_content(tools: Any) -> None:
    ids = await planted(
        tools,
        "UPDATE memories SET source = 'not json' WHERE id = {0}",
        "UPDATE memories SET content = '   ' WHERE id = {1}",
    )
    await cycle(tools, "invalid_json", status="degraded")
    assert rows(tools.engine, "SELECT source FROM memories WHERE id = ?", (ids[0],)) == [("{}",)]
    assert not rows(tools.engine, "SELECT id FROM memories WHERE id = ?", (ids[1],))


async def test_health_missing_msg_id_index(tools: Any) -> None:
    for i in range(2):
        await tools("store", {"agent_id": "a", "message": {"id": f"m{i}", "content": f"x{i}"}})
    plant(
        tools.engine, "DROP INDEX idx_memories_dedup_msg_id", "UPDATE memories SET msg_id = 'same'"
    )
    report = await tools("check_health")
    missing = of(report, "dedup_msg_id_index")[0]
    assert missing["type"] == "dedup_msg_id_index_missing" and missing["colliding_rows"] == 1
    fixed = await cycle(tools, "dedup_msg_id_index", status="unhealthy")
    assert of(fixed, "dedup_msg_id_index")[0]["msg_ids_blanked"] == 1
    assert sorted(rows(tools.engine, "SELECT msg_id FROM memories")) == [("",), ("same",)]


async def test_health_drifted_and_missing_perf_index(tools: Any) -> None:
    await planted(
        tools,
        "DROP INDEX idx_memories_span",
        "DROP INDEX idx_memories_agent",
        "CREATE INDEX idx_memories_agent ON memories(agent_id)",
    )
    report = await tools("check_health")
    found = {(i["object"], i["type"], i["severity"]) for i in of(report, "schema_objects")}
    assert found == {
        ("idx_memories_span", "schema_object_missing", "warn"),
        ("idx_memories_agent", "schema_object_drifted", "warn"),
    }
    await cycle(tools, "schema_objects", status="degraded")


async def test_health_profile_timestamps_and_permissions(tools: Any) -> None:
    ids = await planted(
        tools,
        "UPDATE profiles SET content = printf('%.3000c', 'p')",
        "UPDATE memories SET timestamp = '2999-01-01T00:00:00+00:00' WHERE id = {0}",
        "UPDATE memories SET timestamp = 'last tuesday' WHERE id = {1}",
    )
    os.chmod(tools.engine.settings.db_path, 0o644)
    report = await tools("check_health")
    for check in ("oversized_profile", "future_timestamp", "invalid_timestamp", "file_permissions"):
        assert of(report, check) and of(report, check)[0]["severity"] == "warn", check
    fixed = await tools("check_health", {"fix": True})
    assert fixed["status"] == "healthy", fixed["issues"]
    assert rows(tools.engine, "SELECT length(content) FROM profiles") == [(2000,)]
    stamps = dict(rows(tools.engine, "SELECT id, timestamp FROM memories"))
    assert stamps[ids[0]].endswith("+00:00") and not stamps[ids[0]].startswith("2999")
    assert stamps[ids[1]].endswith("+00:00")
    assert os.stat(tools.engine.settings.db_path).st_mode & 0o777 == 0o600
    assert (await tools("check_health"))["status"] == "healthy"


async def test_health_offset_timestamps_are_normalised(tools: Any) -> None:
    await tools(
        "store",
        {
            "agent_id": "a",
            "message": {"content": "tokyo", "timestamp": "2024-05-01T09:00:00+09:00"},
        },
    )
    await tools("store", {"agent_id": "a", "message": {"content": "utc"}})
    fixed = await cycle(tools, "timestamp_format_drift", status="degraded")
    assert of(fixed, "timestamp_format_drift")[0]["fixed"] == 1
    stamps = {r[0] for r in rows(tools.engine, "SELECT timestamp FROM memories")}
    assert "2024-05-01T00:00:00+00:00" in stamps


async def test_health_embedding_model_mismatch_re_embeds(tools: Any) -> None:
    ids = await corpus(tools)
    # Vectors another model made: same width, different values.
    rng = np.random.default_rng(7)
    for row_id in ids:
        vec = rng.standard_normal(384).astype("<f4")
        vec /= np.linalg.norm(vec)
        plant(
            tools.engine,
            ("UPDATE memories SET embedding = ? WHERE id = ?", (vec.tobytes(), row_id)),
        )
    fixed = await cycle(
        tools, "embedding_model", status="degraded", finding="embedding_model_mismatch"
    )
    assert of(fixed, "embedding_model")[0]["re_embedded"] >= len(ids)


async def test_health_embedding_model_label_of_sidecar(tools: Any) -> None:
    await corpus(tools)
    sidecar = tools.engine.settings.db_path + ".calibration.json"
    with open(sidecar, "w") as f:
        f.write('{"embedding_dim": 384, "embedding_model": "text-embedding-3-small"}')
    report = await tools("check_health", {"checks": ["embedding_model"]})
    # The stored vectors are the configured model's: the label alone is only stale.
    issue = of(report, "embedding_model")[0]
    assert issue["type"] == "embedding_model_label_stale" and issue["severity"] == "info"


async def test_health_future_timestamp_repair_moves_the_row_in_time_scoped_recall(
    tools: Any, store_backend: str
) -> None:
    # The repair rewrites `timestamp`, which no log trigger watches: the index files, which
    # key each row by its instant, must still learn the row's new time (docs/vector-index.md).
    stored = await tools(
        "store",
        {"agent_id": "a", "message": {"content": "zebra crossing", "timestamp": "2999-01-01"}},
    )
    assert stored["result"] == "stored"
    future = {"agent_id": "a", "query": "zebra crossing", "since": "2998-12-31"}
    assert [m["content"] for m in (await tools("recall", future))["messages"]] == ["zebra crossing"]
    # Only this repair: the index checks, which would rebuild a differing file, do not run.
    fixed = await tools("check_health", {"fix": True, "checks": ["future_timestamp"]})
    assert of(fixed, "future_timestamp"), fixed["issues"]
    (created,) = rows(tools.engine, "SELECT created_at FROM memories")
    today = {"agent_id": "a", "query": "zebra crossing", "since": created[0][:10]}
    assert [m["content"] for m in (await tools("recall", today))["messages"]] == ["zebra crossing"]
    assert (await tools("recall", future))["messages"] == []


async def test_health_permissions_cover_the_full_text_files(tools: Any) -> None:
    """The full-text files (the segment among them holds every memory's text; an earlier
    version wrote it 0644) are listed when readable by others, and repaired."""
    await corpus(tools)
    await tools("recall", {"agent_id": "a", "query": "tea"})  # the full-text files exist
    base = os.path.realpath(tools.engine.settings.db_path)
    loose = [f"{base}.memories.fts", f"{base}.memories.fts.sum", f"{base}.memories.fts.lock"]
    for path in loose:
        os.chmod(path, 0o644)
    (finding,) = of(await tools("check_health"), "file_permissions")
    assert sorted(finding["files"]) == sorted(loose)
    await tools("check_health", {"fix": True})
    assert [os.stat(p).st_mode & 0o777 for p in loose] == [0o600] * 3
    assert of(await tools("check_health"), "file_permissions") == []
