"""The check_health verdict and envelope, deep_check, get_session_findings, check_update."""

from __future__ import annotations

import json
import os
from typing import Any

import pytest
from cpersona import __version__
from cpersona.health.registry import NAMES, REPORT_ONLY, summarise, verdict
from health_support import corpus, of, plant, planted, rows

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize(
    ("severities", "status"),
    [
        ([], "healthy"),
        (["info", "info"], "healthy"),
        (["info", "warn"], "degraded"),
        (["warn", "critical", "info"], "unhealthy"),
        (["critical"], "unhealthy"),
    ],
)
def test_health_verdict_rule(severities: list[str], status: str) -> None:
    summary = summarise([{"severity": s} for s in severities])
    assert set(summary) == {"critical", "warn", "info"}
    assert verdict(summary) == status


def test_health_registry_names() -> None:
    assert len(NAMES) == 34 and NAMES[-2:] == ("embedding_model", "stored_credentials")
    assert NAMES[:4] == (
        "memory_annotation",
        "discord_mention",
        "oversized_content",
        "duplicate_content",
    )
    assert set(REPORT_ONLY) == {
        "embedding_backend",
        "schema_version",
        "sqlite_integrity",
        "axis_hygiene",
        "missing_profile",
        "anonymous_source",
        "vector_fallback_config",
        "operating_context_parse",
        "operating_context_size",
    }


async def test_health_unknown_check_names_refuse(tools: Any) -> None:
    await tools("pause_persistence", {})
    out = await tools("check_health", {"checks": ["null_embedding", "bogus", "nope"]})
    assert out["ok"] is False and out["unknown_checks"] == ["bogus", "nope"]
    assert out["error"].startswith("unknown check name(s): bogus, nope. Valid names: ")
    assert out["valid_checks"] == list(NAMES) and out["checks_run"] == []
    deep = await tools("deep_check", {"agent_id": "a", "checks": ["nope"]})
    assert deep["ok"] is False and deep["unknown_checks"] == ["nope"]


async def test_health_selected_checks_dedup_in_request_order(tools: Any) -> None:
    out = await tools(
        "check_health", {"checks": ["schema_version", "null_embedding", "schema_version"]}
    )
    assert out["checks_run"] == ["schema_version", "null_embedding"]


async def test_health_pause_downgrades_fix(tools: Any) -> None:
    await planted(tools, "UPDATE memories SET content = '  ' WHERE id = 1")
    await tools("pause_persistence", {"session_key": "s"})
    out = await tools("check_health", {"fix": True, "session_key": "s"})
    assert out["fixed"] is False and out["repairs_skipped"] is True
    assert out["repairs_skip_reason"] == "no-persist mode active — fix downgraded to fix=False"
    assert "persisted" not in out
    assert rows(tools.engine, "SELECT id FROM memories WHERE id = 1")
    deep = await tools("deep_check", {"agent_id": "a", "fix": True, "session_key": "s"})
    assert deep["fixed"] is False and deep["repairs_skipped"] is True
    # Another session is not paused.
    out = await tools("check_health", {"fix": True, "session_key": "t"})
    assert out["fixed"] is True and "repairs_skipped" not in out
    assert not rows(tools.engine, "SELECT id FROM memories WHERE id = 1")


async def test_health_agent_scope(tools: Any) -> None:
    await corpus(tools, agent="a")
    await corpus(tools, agent="b")
    plant(
        tools.engine,
        "UPDATE memories SET content = '' WHERE agent_id IN ('a', 'b') "
        "AND id IN (SELECT MIN(id) FROM memories GROUP BY agent_id)",
    )
    out = await tools("check_health", {"agent_id": "b", "fix": True})
    assert out["stats"]["agent_memories"] == 5 and out["total_memories"] == 5
    assert of(out, "empty_content")[0]["fixed"] == 1
    left = rows(tools.engine, "SELECT agent_id FROM memories WHERE trim(content) = ''")
    assert left == [("a",)]


async def test_health_operating_context_checks(connect: Any, oc_path: Any) -> None:
    oc_path.write_text('version = 1\n[instructions]\nsummary = "' + "s" * 3100 + '"\n')
    async with connect() as tools:
        out = await tools(
            "check_health", {"checks": ["operating_context_parse", "operating_context_size"]}
        )
        assert [i["type"] for i in out["issues"]] == ["operating_context_size"]
        oc_path.write_text("version = [")
        out = await tools("check_health", {"checks": ["operating_context_parse"]})
        assert out["issues"][0]["severity"] == "warn" and out["status"] == "degraded"


async def test_deep_check_results_and_fixes(tools: Any) -> None:
    await corpus(tools)
    await tools("store", {"agent_id": "a", "message": {"content": "ok"}})
    locked = await tools("store", {"agent_id": "a", "message": {"content": "yes"}})
    await tools("lock_memory", {"memory_id": locked["id"]})
    anon = {"type": "User", "id": "", "name": ""}
    await tools(
        "store", {"agent_id": "a", "message": {"content": "[Kim] hello again", "source": anon}}
    )
    await tools("store", {"agent_id": "a", "message": {"content": "who said this", "source": anon}})
    out = await tools("deep_check", {"agent_id": "a"})
    assert "ok" not in out and out["fixed"] is False
    r = out["results"]
    assert r["short_content"]["count"] == 2
    assert (r["anonymous_source"]["recoverable"], r["anonymous_source"]["unrecoverable"]) == (1, 1)
    assert r["anonymous_source"]["samples"][0]["recovered_name"] == "Kim"
    assert r["embedding_norm"]["count"] == 0 and r["unnormalized_content"]["count"] == 0
    assert r["calibration_staleness"]["status"] == "never_calibrated"
    assert r["stale_profile"]["count"] == 0
    fixed = await tools(
        "deep_check",
        {"agent_id": "a", "fix": True, "checks": ["short_content", "anonymous_source"]},
    )
    assert fixed["checks_run"] == ["short_content", "anonymous_source"]
    assert fixed["results"]["short_content"]["fixed"] == 1  # the locked one stays
    assert fixed["results"]["anonymous_source"]["fixed"] == 1
    contents = {r[0] for r in rows(tools.engine, "SELECT content FROM memories")}
    assert "ok" not in contents and "yes" in contents
    source = rows(tools.engine, "SELECT source FROM memories WHERE content LIKE '[Kim]%'")
    assert json.loads(source[0][0]) == {"type": "User", "id": "", "name": "Kim"}


async def test_deep_check_near_duplicates(tools: Any) -> None:
    await tools("store", {"agent_id": "a", "message": {"content": "the cat sat on the mat"}})
    await tools("store", {"agent_id": "a", "message": {"content": "the cat sat on the mat!"}})
    out = await tools("deep_check", {"agent_id": "a", "checks": ["near_duplicate"]})
    near = out["results"]["near_duplicate"]
    assert near["pairs"] == 1 and near["rows_scanned"] == 2 and near["threshold"] == 0.97


async def test_session_findings_shape(tools: Any) -> None:
    await planted(
        tools,
        "UPDATE memories SET embedding = NULL WHERE id > 1",
        "UPDATE memories SET source = 'x' WHERE id = 1",
    )
    out = await tools("get_session_findings", {"per_kind_limit": 1})
    assert "ok" not in out and out["_meta"] == {"server_version": __version__}
    kinds = {f["kind"] for f in out["findings"]}
    assert "null_embedding_pipeline_down" in kinds and "invalid_json" in kinds
    assert all(out["counts_by_kind"][k] >= 1 for k in kinds)
    assert out["summary"]["status"] == "unhealthy"
    assert "identity_shared" not in out  # stdio
    assert (await tools("get_session_findings", {"include_summary": False})).get("summary") is None
    bad = await tools("get_session_findings", {"per_kind_limit": 0})
    assert bad == {"ok": False, "error": "per_kind_limit must be >= 1", "per_kind_limit": 0}
    # Read-only: nothing was repaired.
    assert rows(tools.engine, "SELECT source FROM memories WHERE id = 1") == [("x",)]


async def test_check_update_disabled_by_default(tools: Any) -> None:
    out = await tools("check_update", {"refresh": True, "apply": True})
    assert "ok" not in out
    assert (out["enabled"], out["state"], out["running"]) == (False, "disabled", __version__)
    assert out["_meta"] == {"server_version": __version__}
    assert out["apply_result"]["applied"] is False
    assert set(out["install"]) >= {"method", "command", "note", "restart_required"}
    called = []
    tools.engine.updates.fetch = lambda: called.append(1) or {}
    await tools("check_update", {"refresh": True})
    assert called == []  # nothing is ever looked up while disabled
    assert not os.path.exists(
        os.path.join(os.path.dirname(tools.engine.settings.db_path), "update-check.json")
    )
    assert "update" not in await tools("recall", {"agent_id": "a", "query": "x"})


async def test_check_update_enabled_verdicts(connect: Any) -> None:
    async with connect(update_check=True) as tools:
        updates = tools.engine.updates
        updates.fetch = lambda: {"2.5.12": False, "2.5.11": False}
        out = await tools("check_update", {"refresh": True})
        assert out["state"] == "unlisted" and out["available"] is None and out["refreshed"]
        updates.fetch = lambda: {__version__: False, "99.0.0": False, "100.0.0rc1": False}
        out = await tools("check_update", {"refresh": True})
        assert (out["state"], out["kind"], out["available"]) == ("newer", "newer", "99.0.0")
        cache = os.path.join(os.path.dirname(tools.engine.settings.db_path), "update-check.json")
        assert os.stat(cache).st_mode & 0o777 == 0o600
        # Served from the cache without a lookup; surfaced by check_health.
        updates.fetch = lambda: pytest.fail("looked up although the cache is fresh")
        assert (await tools("check_update"))["state"] == "newer"
        health = await tools("check_health", {"checks": ["schema_version"]})
        assert of(health, "update_status")[0]["type"] == "update_available"
        # recall tells each session once.
        recalled = await tools("recall", {"agent_id": "a", "query": "x", "session_key": "s"})
        assert recalled["update"]["kind"] == "newer"
        assert recalled["update"]["install"]["restart_required"] is True
        assert "update" not in await tools(
            "recall", {"agent_id": "a", "query": "x", "session_key": " s "}
        )
        assert "update" in await tools("recall", {"agent_id": "a", "query": "x"})
        updates.fetch = lambda: {__version__: True, "0.0.1": False}
        out = await tools("check_update", {"refresh": True, "apply": True})
        assert out["state"] == "yanked"
        assert out["apply_result"]["applied"] is False  # nothing newer to install
        health = await tools("check_health", {"checks": ["schema_version"]})
        assert health["status"] == "degraded"

        def down() -> dict[str, bool]:
            raise OSError("network is unreachable")

        updates.fetch = down
        assert (await tools("check_update", {"refresh": True}))["state"] == "unknown"


async def test_health_fix_on_an_in_memory_database(connect: Any, store_backend: str) -> None:
    if store_backend == "postgresql":
        pytest.skip("an in-memory database is SQLite's")
    async with connect(db_path=":memory:") as tools:
        await planted(
            tools,
            "UPDATE memories SET embedding = NULL WHERE id = 2",
            "INSERT INTO memories_fts(memories_fts) VALUES ('delete-all')",
        )
        assert (await tools("check_health"))["status"] == "unhealthy"
        fixed = await tools("check_health", {"fix": True})
        assert fixed["status"] == "healthy", fixed["issues"]
        assert of(fixed, "file_permissions")[0]["type"] == "file_permissions_skipped"
        assert (await tools("check_health"))["status"] == "healthy"
