"""export_memories -> import_memories through the MCP client: every field comes back, a second
import changes nothing, a dry run predicts the real run, a truncated file writes nothing, and
rows the file carries no vector for are embedded (or counted when embedding is unavailable)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from cpersona.embedding.none import NoneProvider
from portability_support import blobs, import_answer, read_jsonl
from support.mcp_client import Tools

pytestmark = pytest.mark.anyio


async def build_corpus(tools: Tools) -> None:
    """Memories with source/metadata/timestamps/channels/projects/locks, episodes, profiles."""
    stored = []
    for agent, msg in [
        (
            "alice",
            {
                "id": "m1",
                "content": "Postgres pool size is 20",
                "source": {"type": "User", "id": "u1", "name": "Ann"},
                "timestamp": "2026-10-02T01:15:00+09:00",
                "metadata": {"session_id": "1:2", "tags": ["db", "ops"]},
            },
        ),
        ("alice", {"content": "会議は毎週火曜日の10時から", "source": "assistant"}),
        (
            "alice",
            {"id": "m3", "content": "the deploy key rotates every 90 days", "metadata": {"n": 3}},
        ),
        ("bob", {"id": "b1", "content": "bob prefers tabs over spaces"}),
    ]:
        where = {"m1": ("c1", "p1"), "m3": ("c2", "p2")}.get(msg.get("id", ""), ("", ""))
        out = await tools(
            "store",
            {"agent_id": agent, "message": msg, "channel": where[0], "project_id": where[1]},
        )
        assert out["result"] == "stored", out
        stored.append(out["id"])
    assert (await tools("lock_memory", {"memory_id": stored[2], "agent_id": "alice"}))["ok"]
    # Recall stats (bumped by recall only with confidence scoring on): set them directly.
    tools.execute(
        "UPDATE memories SET recall_count = 2, last_recalled_at = "
        "'2026-10-05 08:00:00' WHERE msg_id = 'm1'"
    )
    for agent, summary, where in [
        ("alice", "we sized the Postgres pool", ("c1", "p1")),
        ("bob", "bob's editor settings", ("", "")),
    ]:
        out = await tools(
            "archive_episode",
            {
                "agent_id": agent,
                "summary": summary,
                "keywords": "pool postgres",
                "history": [
                    {"timestamp": "2026-10-01T10:00:00Z"},
                    {"timestamp": "2026-10-01T11:00:00Z"},
                ],
                "resolved": True,
                "channel": where[0],
                "project_id": where[1],
            },
        )
        assert out["ok"], out
    for agent in ("alice", "bob"):
        out = await tools(
            "update_profile", {"agent_id": agent, "profile": f"{agent} is an engineer"}
        )
        assert out["ok"], out


def comparable(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Body records without the ids a new database assigns afresh."""
    return [{k: v for k, v in r.items() if k != "id"} for r in records if r["_type"] != "header"]


async def test_portability_roundtrip_every_field(connect, tmp_path, export_dir: Path):
    async with connect() as source:
        await build_corpus(source)
        out = await source(
            "export_memories",
            {"agent_id": "", "output_path": "full.jsonl", "include_embeddings": True},
        )
        assert out == {
            "ok": True,
            "path": str(export_dir / "full.jsonl"),
            "memories": 4,
            "episodes": 2,
            "profiles": 2,
        }
    exported = read_jsonl(export_dir / "full.jsonl")
    header = exported[0]
    assert header["_type"] == "header" and header["version"] == "cpersona-export/1.0"
    assert (header["memory_count"], header["episode_count"], header["profile_count"]) == (4, 2, 2)
    assert header["has_profile"] is True
    first = exported[1]
    assert first["source"] == {"type": "User", "id": "u1", "name": "Ann"}
    assert first["metadata"] == {"session_id": "1:2", "tags": ["db", "ops"]}
    assert (first["project_id"], first["channel"], first["msg_id"]) == ("p1", "c1", "m1")
    assert (first["recall_count"], first["last_recalled_at"]) == (2, "2026-10-05 08:00:00")
    assert [r["locked"] for r in exported[1:5]] == [0, 0, 1, 0]
    assert all("embedding_b64" in r for r in exported[1:7])
    assert (export_dir / "full.jsonl").stat().st_mode & 0o777 == 0o600

    async with connect(db_path=str(tmp_path / "restored.db")) as target:
        out = await target("import_memories", {"input_path": "full.jsonl"})
        assert out == import_answer(memories=(4, 0), episodes=(2, 0))
        assert (await target("get_profile", {"agent_id": "bob"}))["profile"] == "bob is an engineer"
        out = await target(
            "export_memories",
            {"agent_id": "", "output_path": "again.jsonl", "include_embeddings": True},
        )
        assert out["ok"], out
    assert comparable(read_jsonl(export_dir / "again.jsonl")) == comparable(exported)


async def test_portability_import_twice_changes_nothing(connect, tmp_path, export_dir):
    async with connect() as source:
        await build_corpus(source)
        await source("export_memories", {"agent_id": "", "output_path": "x.jsonl"})
    async with connect(db_path=str(tmp_path / "b.db")) as target:
        preview = await target("import_memories", {"input_path": "x.jsonl", "dry_run": True})
        assert target.rows()["memories"] == []
        first = await target("import_memories", {"input_path": "x.jsonl"})
        assert {**preview, "dry_run": False} == {
            k: v for k, v in first.items() if k != "embedded_on_import"
        }
        before = target.rows()
        second = await target("import_memories", {"input_path": "x.jsonl"})
        assert second == import_answer(memories=(0, 4), episodes=(0, 2))
        assert target.rows() == before
        # The same file under another agent is a new agent's data; once more is a no-op again.
        again = await target(
            "import_memories", {"input_path": "x.jsonl", "target_agent_id": "carol"}
        )
        assert again["imported_memories"] == 4 and again["imported_episodes"] == 2
        repeat = await target(
            "import_memories", {"input_path": "x.jsonl", "target_agent_id": "carol"}
        )
        assert repeat["imported_memories"] == 0 and repeat["skipped_memories"] == 4


async def test_portability_import_embeds_rows_without_vectors(connect, tmp_path, export_dir):
    query = {"agent_id": "alice", "query": "how big is the Postgres pool"}
    async with connect() as source:
        await build_corpus(source)
        await source("export_memories", {"agent_id": "alice", "output_path": "bare.jsonl"})
        expected = await source("recall", query)
    assert not any("embedding_b64" in r for r in read_jsonl(export_dir / "bare.jsonl"))
    db = tmp_path / "embedded.db"
    async with connect(db_path=str(db)) as target:
        out = await target("import_memories", {"input_path": "bare.jsonl"})
        assert out["imported_memories"] == 3 and out["embedded_on_import"] == 4  # + 1 episode
        assert "missing_embeddings" not in out
        # Same model, same vectors: the restored agent recalls exactly what the original did.
        got = await target("recall", query)
    assert [m["content"] for m in got["messages"]] == [m["content"] for m in expected["messages"]]
    assert all(blob is not None for blob in blobs(target.engine.settings, "memories").values())
    assert all(blob is not None for blob in blobs(target.engine.settings, "episodes").values())


async def test_portability_import_counts_rows_left_without_vectors(connect, tmp_path):
    async with connect() as source:
        await build_corpus(source)
        await source("export_memories", {"agent_id": "bob", "output_path": "bob.jsonl"})
    db = tmp_path / "none.db"
    async with connect(db_path=str(db), embedder=NoneProvider()) as target:
        out = await target("import_memories", {"input_path": "bob.jsonl"})
        assert out["ok"] and out["imported_memories"] == 1 and out["imported_episodes"] == 1
        assert out["missing_embeddings"] == 2
        assert "check_health" in out["missing_embeddings_hint"]
        assert "embedded_on_import" not in out
    assert list(blobs(target.engine.settings, "memories").values()) == [None]


def write_lines(path: Path, records: list[Any]) -> None:
    path.write_text(
        "".join(
            (r if isinstance(r, str) else json.dumps(r, ensure_ascii=False)) + "\n" for r in records
        ),
        encoding="utf-8",
    )


async def test_portability_import_truncated_file_writes_nothing(tools, export_dir):
    await tools("store", {"agent_id": "a", "message": {"content": "already here"}})
    before = tools.rows()
    write_lines(
        export_dir / "cut.jsonl",
        [
            {"_type": "header", "memory_count": 3, "episode_count": 0, "profile_count": 0},
            {"_type": "memory", "agent_id": "a", "content": "one"},
            {"_type": "memory", "agent_id": "a", "content": "two"},
        ],
    )
    out = await tools("import_memories", {"input_path": "cut.jsonl"})
    assert out["ok"] is False
    assert out["error"].startswith("import aborted and rolled back: file truncated")
    assert (out["imported_memories"], out["imported_episodes"]) == (0, 0)
    assert tools.rows() == before
    dry = await tools("import_memories", {"input_path": "cut.jsonl", "dry_run": True})
    assert dry["error"].startswith("import aborted (dry run — nothing was written)")


async def test_portability_import_line_errors_and_normalised_stamps(tools, export_dir):
    write_lines(
        export_dir / "mixed.jsonl",
        [
            {"_type": "header", "version": "cpersona-export/1.0"},
            "{not json",
            {"_type": "memory", "content": "no owner"},
            {"_type": "gizmo"},
            {"note": "no _type: ignored"},
            [1, 2],
            {
                "_type": "memory",
                "agent_id": "a",
                "content": "offset stamp",
                "created_at": "2026-10-02T01:15:00+09:00",
                "last_recalled_at": "2026-10-03T00:00:00Z",
                "timestamp": "2026-10-02T01:15:00+09:00",
                "recall_count": 2,
                "locked": True,
            },
            {
                "_type": "memory",
                "agent_id": "a",
                "content": "bad stamp",
                "created_at": "yesterday",
                "embedding_b64": "!!!",
            },
            {"_type": "memory", "agent_id": "a", "content": "[Memory from x] "},
            {"_type": "memory", "agent_id": "a", "content": ""},
            {"_type": "episode", "agent_id": "a", "summary": "kw list", "keywords": ["x", "y"]},
            {"_type": "profile", "agent_id": "a", "content": "   "},
        ],
    )
    out = await tools("import_memories", {"input_path": "mixed.jsonl"})
    assert out["ok"] is True
    assert (out["imported_memories"], out["skipped_memories"]) == (2, 2)
    assert out["imported_episodes"] == 1 and out["profile_updated"] is False
    errors = out["errors"]
    assert errors[0].startswith("Line 2: invalid JSON: ")
    assert "Line 3: memory missing agent_id" in errors
    assert "Line 4: unknown type 'gizmo'" in errors
    assert "Line 6: not a JSON object" in errors
    assert any(e.startswith("Line 8: created_at 'yesterday'") for e in errors)
    assert any(e.startswith("Line 8: embedding_b64 is not valid base64") for e in errors)
    assert any(e.startswith("Line 9: memory is empty after sanitisation") for e in errors)
    assert any(e.startswith("Line 12: profile is empty after sanitisation") for e in errors)
    assert not any(e.startswith(("Line 5", "Line 10")) for e in errors)
    rows = {
        r["content"]: r
        for r in tools.engine.db.query(
            "SELECT content, created_at, last_recalled_at, recall_count, locked, timestamp "
            "FROM memories"
        )
    }
    stamped = rows["offset stamp"]
    assert stamped["created_at"] == "2026-10-01 16:15:00"
    assert stamped["last_recalled_at"] == "2026-10-03 00:00:00"
    assert stamped["timestamp"] == "2026-10-02T01:15:00+09:00"  # caller's stamp: verbatim
    assert (stamped["recall_count"], stamped["locked"]) == (2, 1)
    # An unusable created_at becomes the import time, canonical like every other.
    assert len(rows["bad stamp"]["created_at"]) == 19 and rows["bad stamp"]["created_at"][10] == " "
    episode = tools.engine.db.query_one("SELECT keywords FROM episodes")
    assert episode["keywords"] == "x y"
