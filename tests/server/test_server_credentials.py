"""No credentials kept (issue 22), through the official MCP client on both backends.

Every write that takes text (store, update_memory, archive_episode, update_profile,
import_memories) redacts credentials before anything is written under CPERSONA_SECRETS=redact
(the default) and says so in `redacted`; `reject` refuses in each tool's documented shape
without echoing the value; `allow` stores verbatim as 2.5.x does. Dedup compares the stored
text, identifier search keeps working, and check_health finds rows written under `allow` and
redacts them in place with `fix=true`.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from cpersona.embedding.hashing import HashingProvider

pytestmark = pytest.mark.anyio

AGENT = "alice"
TOKEN = "ghp_" + "Zq8" * 12
PASSWORD = "Tr0ub4dor&3"
TEXT = f"deploy notes: export GITHUB_TOKEN={TOKEN} and the db password: {PASSWORD}"
REDACTED = (
    "deploy notes: export GITHUB_TOKEN=[REDACTED:github_token] and the db password: "
    "[REDACTED:password]"
)


async def store(tools: Any, content: str, **message: Any) -> dict[str, Any]:
    return await tools("store", {"agent_id": AGENT, "message": {"content": content, **message}})


async def contents(tools: Any) -> list[str]:
    listed = await tools("list_memories", {"agent_id": AGENT, "limit": 100})
    return [m["content"] for m in listed["memories"]]


async def test_store_redacts_and_says_what(connect: Any) -> None:
    async with connect() as tools:
        out = await store(tools, TEXT, metadata={"api_key": "k3y-abc123", "note": "plain"})
        assert out == {
            "ok": True,
            "result": "stored",
            "id": out["id"],
            "embedded": True,
            "redacted": {"api_key": 1, "github_token": 1, "password": 1},
        }
        assert await contents(tools) == [REDACTED]
        recalled = await tools("recall", {"agent_id": AGENT, "query": TOKEN})
        assert all(TOKEN not in json.dumps(m) for m in recalled["messages"])
        got = await tools("get_contents", {"agent_id": AGENT, "refs": [f"mem:{out['id']}"]})
        assert TOKEN not in json.dumps(got) and "k3y-abc123" not in json.dumps(got)


async def test_the_stored_vector_embeds_the_redacted_text(connect: Any, tmp_path: Path) -> None:
    async with connect() as tools:
        await store(tools, TEXT)
        path = tmp_path / "vectors.jsonl"
        await tools(
            "export_memories",
            {"agent_id": AGENT, "output_path": str(path), "include_embeddings": True},
        )
    (row,) = [r for r in map(json.loads, path.read_text().splitlines()) if r["_type"] == "memory"]
    stored = np.frombuffer(base64.b64decode(row["embedding_b64"]), dtype="<f4")
    for text, same in [(REDACTED, True), (TEXT, False)]:
        expected = HashingProvider().embed([text], kind="passage")[0]
        assert np.array_equal(stored, expected) is same


async def test_store_without_credentials_answers_as_before(connect: Any) -> None:
    async with connect() as tools:
        out = await store(
            tools, "I forgot my password again; commit 3f786850e387550fdab836ed7e6dc8"
        )
        assert set(out) == {"ok", "result", "id", "embedded"}


async def test_resending_the_same_message_is_skipped(connect: Any) -> None:
    async with connect() as tools:
        first = await store(tools, TEXT)
        again = await store(tools, TEXT)
        assert again["result"] == "skipped" and again["id"] == first["id"]
        by_id = await store(tools, TEXT + " (v2)", id="m-1")
        assert by_id["result"] == "stored"
        assert (await store(tools, "other", id="m-1"))["result"] == "skipped"


async def test_every_text_write_redacts(connect: Any, tmp_path: Path) -> None:
    async with connect() as tools:
        memory_id = (await store(tools, "plain text"))["id"]
        updated = await tools(
            "update_memory", {"memory_id": memory_id, "content": TEXT, "agent_id": AGENT}
        )
        assert updated == {
            "ok": True,
            "updated_id": memory_id,
            "redacted": {"github_token": 1, "password": 1},
        }
        assert await contents(tools) == [REDACTED]
        episode = await tools(
            "archive_episode",
            {"agent_id": AGENT, "summary": TEXT, "keywords": f"deploy {TOKEN}"},
        )
        assert episode["ok"] and episode["redacted"] == {"github_token": 2, "password": 1}
        profile = await tools("update_profile", {"agent_id": AGENT, "profile": TEXT})
        assert profile["redacted"] == {"github_token": 1, "password": 1}
        assert (await tools("get_profile", {"agent_id": AGENT}))["profile"] == REDACTED
        path = tmp_path / "all.jsonl"
        exported = await tools("export_memories", {"agent_id": AGENT, "output_path": str(path)})
        assert exported["ok"]
        dumped = path.read_text(encoding="utf-8")
        assert (
            TOKEN not in dumped and PASSWORD not in dumped and "[REDACTED:github_token]" in dumped
        )


async def test_import_redacts_and_drops_the_file_vector(connect: Any, tmp_path: Path) -> None:
    path = tmp_path / "in.jsonl"
    original = HashingProvider().embed([TEXT], kind="passage")[0].astype("<f4").tobytes()
    lines = [
        {
            "_type": "memory",
            "agent_id": AGENT,
            "content": TEXT,
            "embedding_b64": base64.b64encode(original).decode(),
        },
        {"_type": "episode", "agent_id": AGENT, "summary": f"rotated {TOKEN}", "keywords": ""},
        {"_type": "profile", "agent_id": AGENT, "content": f"password={PASSWORD}"},
        {"_type": "memory", "agent_id": AGENT, "content": "nothing secret here"},
    ]
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n", encoding="utf-8")
    async with connect() as tools:
        dry = await tools("import_memories", {"input_path": str(path), "dry_run": True})
        assert dry["redacted"] == {"github_token": 2, "password": 2}
        out = await tools("import_memories", {"input_path": str(path)})
        assert out["ok"] and out["imported_memories"] == 2 and out["imported_episodes"] == 1
        assert out["redacted"] == {"github_token": 2, "password": 2}
        assert sorted(await contents(tools)) == sorted([REDACTED, "nothing secret here"])
        dump = tmp_path / "vectors.jsonl"
        await tools(
            "export_memories",
            {"agent_id": AGENT, "output_path": str(dump), "include_embeddings": True},
        )
        vectors = {
            r["content"]: np.frombuffer(base64.b64decode(r["embedding_b64"]), dtype="<f4")
            for r in map(json.loads, dump.read_text().splitlines())
            if r["_type"] == "memory"
        }
        # The file's vector embedded the credential: the row got one of its stored text.
        assert np.array_equal(vectors[REDACTED], HashingProvider().embed([REDACTED])[0])
        again = await tools("import_memories", {"input_path": str(path)})
        assert again["imported_memories"] == again["imported_episodes"] == 0
        assert again["redacted"] == {"password": 1}  # the profile is written again


async def test_reject_refuses_every_write_without_echoing_the_value(
    connect: Any, tmp_path: Path
) -> None:
    path = tmp_path / "in.jsonl"
    path.write_text(json.dumps({"_type": "memory", "agent_id": AGENT, "content": TEXT}) + "\n")
    async with connect(secrets="reject") as tools:
        out = await store(tools, TEXT)
        assert out["ok"] is False and out["result"] == "rejected"
        assert "github_token" in out["reason"] and "CPERSONA_SECRETS=reject" in out["reason"]
        memory_id = (await store(tools, "plain"))["id"]
        refusals = [
            await tools("update_memory", {"memory_id": memory_id, "content": TEXT}),
            await tools("archive_episode", {"agent_id": AGENT, "summary": TEXT}),
            await tools("update_profile", {"agent_id": AGENT, "profile": TEXT}),
            await tools("import_memories", {"input_path": str(path)}),
        ]
        for refused in [out, *refusals]:
            shown = json.dumps(refused)
            assert TOKEN not in shown and PASSWORD not in shown
        for refused in refusals:
            assert refused["ok"] is False and "credentials" in refused["error"]
        assert "line" in refusals[-1]["error"] and refusals[-1]["imported_memories"] == 0
        assert await contents(tools) == ["plain"]
        episodes = await tools("list_episodes", {"agent_id": AGENT})
        assert episodes["episodes"] == []


async def test_allow_stores_verbatim_as_before(connect: Any) -> None:
    async with connect(secrets="allow") as tools:
        out = await store(tools, TEXT)
        assert set(out) == {"ok", "result", "id", "embedded"}
        assert await contents(tools) == [TEXT]


@pytest.mark.parametrize("confidence", [False, True])
async def test_identifier_search_answers_as_without_redaction(
    connect: Any, tmp_path: Path, confidence: bool
) -> None:
    """Exact-match and gate-fallback recall by identifiers: the same answer as under `allow`
    (the rows hold identifiers, no credential), and each row is found by its identifier."""
    digest = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
    rows = [
        # tests/retrieval/recall_support.py's LEXICAL: found for its CVE id by full text only.
        "Quarterly security digest: we rotated credentials, refreshed dependency pins, "
        "reviewed firewall rules, archived stale accounts, retrained staff on phishing, "
        "replaced expiring certificates, validated backups, tightened container policies, "
        "documented vendor contacts, rehearsed incident drills, updated asset inventories, "
        "and confirmed the CVE-2024-3094 remediation across every fleet.",
        f"release artefact sha256 {digest} signed by the build farm",
        "build 2024.11.05-1234 of ticket PROJ-4711 passed for 123e4567-e89b-12d3-a456-426614174000",
        "lunch order is ramen on friday",
    ]
    queries = ["CVE-2024-3094", digest, "PROJ-4711", "123e4567-e89b-12d3-a456-426614174000"]
    answers: dict[str, list[Any]] = {}
    for mode in ("allow", "redact"):
        async with connect(
            secrets=mode, confidence_enabled=confidence, db_path=str(tmp_path / f"{mode}.db")
        ) as tools:
            for row in rows:
                assert set(await store(tools, row)) == {"ok", "result", "id", "embedded"}
            assert sorted(await contents(tools)) == sorted(rows)
            answers[mode] = [
                [
                    {k: v for k, v in m.items() if k != "timestamp"}
                    for m in (await tools("recall", {"agent_id": AGENT, "query": q}))["messages"]
                ]
                for q in queries
            ]
    assert answers["redact"] == answers["allow"]
    assert rows[1] in [m["content"] for m in answers["redact"][1]]
    if confidence:  # the contract's gate-fallback case: the identifier's row is rescued
        assert [m["content"] for m in answers["redact"][0]] == [rows[0]]


async def test_check_health_finds_and_fix_redacts_rows_written_under_allow(connect: Any) -> None:
    async with connect(secrets="allow") as tools:
        kept = (await store(tools, TEXT))["id"]
        await tools("archive_episode", {"agent_id": AGENT, "summary": f"rotated {TOKEN}"})
        await tools("update_profile", {"agent_id": AGENT, "profile": f"token: {TOKEN}"})
        await store(tools, "an ordinary memory")
        allowed = await tools("check_health", {"checks": ["stored_credentials"]})
        assert [i["needs_human_review"] for i in allowed["issues"]] == [True, True, True]
    async with connect() as tools:
        report = await tools("check_health", {"checks": ["stored_credentials"]})
        shown = json.dumps(report)
        assert TOKEN not in shown and PASSWORD not in shown
        by_table = {i["table"]: i for i in report["issues"]}
        assert set(by_table) == {"memories", "episodes", "profiles"}
        assert by_table["memories"]["sample_ids"] == [kept]
        assert by_table["memories"]["kinds"] == {"github_token": 1, "password": 1}
        assert report["status"] == "degraded"
        fixed = await tools("check_health", {"checks": ["stored_credentials"], "fix": True})
        assert fixed["status"] == "healthy"
        assert {i["table"]: i["fixed"] for i in fixed["issues"]} == {
            "memories": 1,
            "episodes": 1,
            "profiles": 1,
        }
        assert {i["table"]: i.get("re_embedded") for i in fixed["issues"]} == {
            "memories": 1,
            "episodes": 1,
            "profiles": None,
        }
        assert REDACTED in await contents(tools)
        recalled = await tools("recall", {"agent_id": AGENT, "query": TOKEN})
        assert all(TOKEN not in json.dumps(m) for m in recalled["messages"])
        episodes = await tools("list_episodes", {"agent_id": AGENT})
        assert [e["summary"] for e in episodes["episodes"]] == ["rotated [REDACTED:github_token]"]
        profile = await tools("get_profile", {"agent_id": AGENT})
        assert profile["profile"] == "token: [REDACTED:github_token]"
        vectors = await tools(
            "check_health", {"checks": ["null_embedding", "null_episode_embedding"]}
        )
        assert vectors["issues"] == []
        # The full-text index files keep a rewritten row's old record until compaction: the
        # fix rewrote them, so the token is in neither (nor in SQLite's own FTS5 answers).
        for index in tools.engine.fts.values():
            assert TOKEN.encode() not in index.path.read_bytes()
