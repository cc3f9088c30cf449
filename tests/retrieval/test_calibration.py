"""calibrate_threshold, set_recall_precision, get_recall_precision (retrieval.md §15).

Through the MCP client where the effect is observable. The hashing embedder is deterministic,
so the test recomputes every threshold from the corpus with plain numpy (an independent
implementation of §15.3's formulas) and compares. Thirty-six memories keep every fused-gate
draw identical (each draw uses up to 40 pseudo-queries, i.e. all of them).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from calibration_support import close, corpus, fill, null_scores, oracle_sep, temporal, vectors
from cpersona.retrieval.scoring import heuristic_gate
from support.mcp_client import Tools

# The calibration sidecar is a file beside a SQLite database; the kernels are the extension's.
pytestmark = [pytest.mark.anyio, pytest.mark.runs_on(kernel="rust", store_backend="sqlite")]


# -- calibrate_threshold ----------------------------------------------------------------------


async def test_calibrate_zscore_matches_numpy(tools: Tools) -> None:
    await fill(tools)
    out = await tools("calibrate_threshold", {"agent_id": "a", "method": "zscore", "z_factor": 1.5})
    x = null_scores(vectors(corpus()))
    expected = round(max(x.mean() + 1.5 * x.std(), 0.05), 4)
    assert out["ok"] is True and out["scope"] == "per_agent" and out["agent_id"] == "a"
    assert out["method"] == "zscore" and out["z_factor"] == 1.5
    assert out["sampled_embeddings"] == 36 and out["num_pairs"] == 36 * 35 // 2
    assert out["embedding_dim"] == 384
    assert close(out["new_threshold"], expected)
    assert out["old_threshold"] == 0.3  # CPERSONA_VECTOR_MIN_SIMILARITY until calibrated
    dist = out["distribution"]
    assert close(dist["mean"], x.mean()) and close(dist["std"], x.std())
    assert close(dist["median"], np.quantile(x, 0.5)) and close(dist["p95"], np.quantile(x, 0.95))
    assert close(out["null_admit_rate"], np.mean(x >= out["new_threshold"]))
    assert "proxy_source" not in out and "youden_j" not in out
    assert out["sidecar_persisted"] is True
    again = await tools("calibrate_threshold", {"agent_id": "a", "method": "zscore"})
    assert again["old_threshold"] == out["new_threshold"]
    assert close(again["new_threshold"], max(x.mean() + x.std(), 0.05))


@pytest.mark.parametrize(("given", "p"), [(95, 0.95), (0.8, 0.8), (100, 1.0)])
async def test_calibrate_percentile_accepts_a_percent(tools: Tools, given: float, p: float) -> None:
    await fill(tools)
    out = await tools(
        "calibrate_threshold", {"agent_id": "a", "method": "percentile", "percentile": given}
    )
    x = null_scores(vectors(corpus()))
    assert out["percentile"] == p
    assert close(out["new_threshold"], max(float(np.quantile(x, p)), 0.05))


async def test_calibrate_separation_temporal_matches_numpy(tools: Tools) -> None:
    await fill(tools)
    out = await tools("calibrate_threshold", {"agent_id": "a"})  # separation is the default
    v = vectors(corpus())
    x, y = null_scores(v), temporal(corpus(), v)
    assert len(y) == 33  # three days of twelve consecutive rows
    threshold, youden = oracle_sep(x, y, 0.05, 1.0)
    assert out["method"] == "separation" and out["proxy_source"] == "temporal"
    assert close(out["new_threshold"], threshold)
    assert close(out["youden_j"], youden)
    assert close(out["pos_mean"], y.mean())
    assert close(out["pos_admit_rate"], np.mean(y >= out["new_threshold"]))


async def test_calibrate_separation_falls_back_to_nearest_neighbours(tools: Tools) -> None:
    # An hour between rows: no temporal pair, so each vector's best match is its positive.
    rows = [
        (content, f"2024-03-{1 + i // 24:02d}T{i % 24:02d}:00:00Z")
        for i, (content, _) in enumerate(corpus()[:20])
    ]
    await fill(tools, rows=rows)
    out = await tools("calibrate_threshold", {"agent_id": "a", "method": "separation"})
    v = vectors(rows)
    gram = v @ v.T
    np.fill_diagonal(gram, -np.inf)
    threshold, youden = oracle_sep(null_scores(v), gram.max(axis=1), 0.05, 1.0)
    assert out["proxy_source"] == "nn_fallback"
    assert close(out["new_threshold"], threshold) and close(out["youden_j"], youden)


async def test_calibrate_global_uses_every_agent(tools: Tools) -> None:
    rows = corpus()
    await fill(tools, "a", rows[:18])
    await fill(tools, "b", rows[18:])
    out = await tools(
        "calibrate_threshold", {"agent_id": "", "method": "percentile", "percentile": 0.9}
    )
    assert out["scope"] == "global" and out["sampled_embeddings"] == 36
    assert close(out["new_threshold"], np.quantile(null_scores(vectors(rows)), 0.9))
    assert "fused_gate" not in out  # the gate is per agent
    assert tools.engine.thresholds.global_threshold == out["new_threshold"]
    assert tools.engine.thresholds.agent_thresholds == {}


async def test_calibrate_needs_ten_embeddings(tools: Tools) -> None:
    await fill(tools, rows=corpus()[:9])
    out = await tools("calibrate_threshold", {"agent_id": "a"})
    assert out == {"ok": False, "error": "Need at least 10 embeddings, found 9"}
    out = await tools("calibrate_threshold", {"agent_id": "nobody"})
    assert out == {"ok": False, "error": "Need at least 10 embeddings, found 0"}
    await fill(tools, rows=corpus()[9:12])
    out = await tools("calibrate_threshold", {"agent_id": "a", "sample_size": 4})
    assert out == {"ok": False, "error": "Need at least 10 embeddings, found 4"}
    assert (await tools("calibrate_threshold", {"agent_id": "a"}))["sampled_embeddings"] == 12


async def test_calibrate_needs_ten_of_one_width(tools: Tools) -> None:
    await fill(tools, rows=corpus()[:12])
    with tools.engine.db.atomic() as conn:  # six rows of another width (a model change)
        conn.execute(
            "UPDATE memories SET embedding = ? WHERE id <= 6", (np.ones(8, dtype="<f4").tobytes(),)
        )
    out = await tools("calibrate_threshold", {"agent_id": "a"})
    # 6 of width 384 and 6 of width 8: the tie goes to the wider, which has only six.
    assert out == {"ok": False, "error": "Need at least 10 same-dimension embeddings, found 6"}


async def test_calibrate_argument_errors(tools: Tools) -> None:
    await fill(tools, rows=corpus()[:12])
    for given, shown in ((150, "150"), (-0.5, "-0.5"), (1000.5, "1000.5")):
        out = await tools("calibrate_threshold", {"agent_id": "a", "percentile": given})
        assert out == {
            "ok": False,
            "error": f"percentile must be in (0, 1] (or a percent 1-100), got {shown}",
        }
    for method in ("bogus", ""):  # the schema's enum refuses it before the tool runs
        result = await tools.raw("calibrate_threshold", {"agent_id": "a", "method": method})
        assert result.is_error
        assert result.content[0].text.startswith("Input validation error")
    # Below the schema (a library caller, or CPERSONA_CALIBRATE_METHOD) the tool's own text.
    out = tools.engine.calibrator.calibrate("a", method="bogus")
    assert out == {
        "ok": False,
        "error": "Invalid method 'bogus'. Supported: percentile, separation, zscore",
    }
    assert tools.engine.thresholds.agent_thresholds == {}


async def test_calibrate_clamps_sample_and_z(connect: Callable[..., Any]) -> None:
    async with connect(calibrate_max_sample=12) as tools:
        await fill(tools)
        out = await tools(
            "calibrate_threshold",
            {"agent_id": "a", "sample_size": 10**6, "method": "zscore", "z_factor": 99},
        )
        assert out["sampled_embeddings"] == 12 and out["num_pairs"] == 66
        assert out["z_factor"] == 10.0
        out = await tools(
            "calibrate_threshold", {"agent_id": "a", "method": "zscore", "z_factor": -99}
        )
        assert out["z_factor"] == -10.0 and out["new_threshold"] == 0.05  # the floor


async def test_calibrate_paused_hook_changes_nothing(tools: Tools) -> None:
    await fill(tools)
    cal = tools.engine.calibrator
    assert cal.calibrate("a", percentile=200, paused=True)["ok"] is False  # validated first
    out = cal.calibrate("a", paused=True)
    assert out["ok"] is True and out["sidecar_persisted"] is False
    assert out["new_threshold"] is None and out["sampled_embeddings"] == 0
    assert tools.engine.thresholds.agent_thresholds == {}
    assert not Path(tools.engine.settings.db_path + ".calibration.json").exists()
    out = cal.set_precision("a", "strict", paused=True)
    assert out == {
        "ok": True,
        "agent_id": "a",
        "precision": "strict",
        "beta": 2.0,
        "cleared": False,
        "fused_gate": None,
        "calibrate": None,
    }
    assert (await tools("get_recall_precision", {"agent_id": "a"}))["overridden"] is False


async def test_quality_tools_published_schemas(tools: Tools) -> None:
    listed = {t.name: t for t in (await tools.client.list_tools()).tools}
    names = list(listed)
    assert names.index("calibrate_threshold") + 1 == names.index("set_recall_precision")
    assert names.index("set_recall_precision") + 1 == names.index("get_recall_precision")
    cal = listed["calibrate_threshold"].input_schema
    assert cal["required"] == ["agent_id"]
    assert cal["properties"]["method"]["enum"] == ["separation", "percentile", "zscore"]
    assert {k: cal["properties"][k]["type"] for k in ("sample_size", "z_factor", "percentile")} == {
        "sample_size": "integer",
        "z_factor": "number",
        "percentile": "number",
    }
    hints = {
        name: (
            t.annotations.read_only_hint,
            t.annotations.destructive_hint,
            t.annotations.idempotent_hint,
        )
        for name, t in listed.items()
    }
    assert hints["calibrate_threshold"] == (False, False, False)
    assert hints["set_recall_precision"] == (False, False, True)
    assert hints["get_recall_precision"][0] is True
    assert "fused gate" in listed["set_recall_precision"].description


# -- set_recall_precision / get_recall_precision ----------------------------------------------


async def test_precision_orders_the_fused_gate(connect: Callable[..., Any]) -> None:
    async with connect(recall_mode="rsf") as tools:
        await fill(tools)
        gates = {}
        for level, beta in (("lenient", 0.5), ("balanced", 1.0), ("strict", 2.0)):
            out = await tools("set_recall_precision", {"agent_id": "a", "precision": level})
            assert out["ok"] is True and out["precision"] == level and out["beta"] == beta
            assert out["cleared"] is False
            assert out["calibrate"] == {
                "ok": True,
                "scope": "per_agent",
                "new_threshold": out["calibrate"]["new_threshold"],
            }
            gate = out["fused_gate"]
            assert gate["signal"] == "rsf" and gate["beta"] == beta
            assert gate["threshold_draws"] == [gate["threshold"]] * 5  # all 36 queries each draw
            gates[level] = gate["threshold"]
            assert tools.engine.thresholds.fused_gate("a") == (gate["threshold"], "rsf")
        assert gates["lenient"] <= gates["balanced"] <= gates["strict"]
        assert gates["lenient"] < gates["strict"]


async def test_precision_clear_and_get_shapes(tools: Tools, db_path: str) -> None:
    await fill(tools)
    get = await tools("get_recall_precision", {"agent_id": "a"})
    assert get == {
        "ok": True,
        "agent_id": "a",
        "precision": "balanced",
        "beta": 1.0,
        "overridden": False,
        "global_precision": "balanced",
        "global_beta": 1.0,
    }
    out = await tools("set_recall_precision", {"agent_id": "a", "precision": "STRICT"})
    assert out["precision"] == "strict" and out["beta"] == 2.0
    assert (await tools("get_recall_precision", {"agent_id": "a"}))["overridden"] is True
    out = await tools(
        "set_recall_precision", {"agent_id": "a", "beta": 1.7, "precision": "nonsense"}
    )  # beta wins
    assert (out["ok"], out["precision"], out["beta"]) == (True, "custom", 1.7)
    assert (await tools("get_recall_precision", {"agent_id": "a"}))["precision"] == "custom"
    assert json.loads(Path(db_path + ".calibration.json").read_text())["agent_betas"] == {"a": 1.7}
    out = await tools("set_recall_precision", {"agent_id": "a", "beta": 0.5})
    assert out["precision"] == "lenient"
    out = await tools("set_recall_precision", {"agent_id": "a"})
    assert (out["ok"], out["precision"], out["beta"], out["cleared"]) == (
        True,
        "default",
        1.0,
        True,
    )
    assert await tools("get_recall_precision", {"agent_id": "a"}) == get
    assert json.loads(Path(db_path + ".calibration.json").read_text())["agent_betas"] == {}


async def test_precision_global_default_from_settings(connect: Callable[..., Any]) -> None:
    async with connect(fused_gate_beta=1.5) as tools:
        get = await tools("get_recall_precision", {"agent_id": "x"})
        assert (get["precision"], get["beta"], get["global_precision"], get["global_beta"]) == (
            "custom",
            1.5,
            "custom",
            1.5,
        )
    async with connect(recall_precision="strict") as tools:
        get = await tools("get_recall_precision", {"agent_id": "x"})
        assert (get["global_precision"], get["global_beta"]) == ("strict", 2.0)


async def test_precision_refusals(tools: Tools) -> None:
    for name in ("set_recall_precision", "get_recall_precision"):
        assert await tools(name, {"agent_id": ""}) == {"ok": False, "error": "agent_id is required"}
    out = await tools("set_recall_precision", {"agent_id": "a", "precision": " strict"})
    assert out == {
        "ok": False,
        "error": "Unknown precision ' strict'; expected strict / balanced / lenient",
    }
    # Too few embeddings: the calibration cannot run, so the override is rolled back.
    await fill(tools, rows=corpus()[:5])
    out = await tools("set_recall_precision", {"agent_id": "a", "precision": "strict"})
    assert out == {
        "ok": False,
        "agent_id": "a",
        "precision": "strict",
        "beta": 2.0,
        "cleared": False,
        "error": "Need at least 10 embeddings, found 5",
    }
    assert (await tools("get_recall_precision", {"agent_id": "a"}))["overridden"] is False


# -- the gate recall uses ---------------------------------------------------------------------


def scored(messages: list[dict[str, Any]], signal: str) -> dict[str, float]:
    return {
        m["content"]: m["match_reason"]["score"]
        for m in messages
        if m.get("match_reason", {}).get("signal") == signal
    }


async def test_calibrated_gate_keeps_what_the_heuristic_dropped(
    connect: Callable[..., Any],
) -> None:
    async with connect(recall_mode="rsf") as tools:
        await fill(tools)
        query = {"agent_id": "a", "query": "garden log: basil today", "limit": 30}
        before = scored((await tools("recall", query))["messages"], "rsf")
        heuristic = heuristic_gate(36)
        assert before and min(before.values()) >= heuristic
        out = await tools("set_recall_precision", {"agent_id": "a", "precision": "lenient"})
        gate = out["fused_gate"]["threshold"]
        assert gate < heuristic
        after = scored((await tools("recall", query))["messages"], "rsf")
        assert min(after.values()) >= gate
        assert any(score < heuristic for score in after.values())  # heuristic would drop it


async def test_calibrated_rrf_gate_is_on_the_rrf_scale(connect: Callable[..., Any]) -> None:
    # CPersona 2.5.12 floors an rrf gate at the cosine-scale 0.05, above every keyword-only
    # row's best rrf (2/61); cpersona scales the floor by 3/(k+1) (docs/compatibility.md).
    async with connect() as tools:  # rrf: only rows without a vector hit are gated on rrf
        # A long row that names the query once: found by full-text search only.
        filler = " ".join(f"item{i} shelf{i}" for i in range(40))
        await fill(
            tools,
            rows=[
                *corpus(),
                (f"warehouse inventory {filler} zucchini crate", "2024-03-01T10:30:00Z"),
            ],
        )
        query = {"agent_id": "a", "query": "zucchini", "limit": 30}
        before = scored((await tools("recall", query))["messages"], "rrf")
        assert len(before) == 1  # it passed the heuristic m(N) * 3/(k+1)
        out = await tools("calibrate_threshold", {"agent_id": "a"})
        gate = out["fused_gate"]
        assert gate["signal"] == "rrf"
        assert 0.05 * 3 / 61 - 1e-4 <= gate["threshold"] <= 3 / 61
        after = scored((await tools("recall", query))["messages"], "rrf")
        expect = {k: v for k, v in before.items() if v >= gate["threshold"]}
        assert after == expect
