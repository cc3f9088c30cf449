"""calibrate_threshold, set_recall_precision, get_recall_precision (retrieval.md §15).

Through the MCP client where the effect is observable. The hashing embedder is deterministic,
so the test recomputes every threshold from the corpus with plain numpy (an independent
implementation of §15.3's formulas) and compares. Thirty-six memories keep every fused-gate
draw identical (each draw uses up to 40 pseudo-queries, i.e. all of them).
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from cpersona.embedding.hashing import HashingProvider
from cpersona.embedding.none import NoneProvider
from cpersona.engine import Engine
from cpersona.retrieval.scoring import heuristic_gate
from cpersona.retrieval.sidecar import SCORING_VERSION
from support.mcp_client import Tools, in_memory

# The calibration sidecar is a file beside a SQLite database; the kernels are the extension's.
pytestmark = [pytest.mark.anyio, pytest.mark.runs_on(kernel="rust", store_backend="sqlite")]

TOPICS = {
    "garden": ["tomato", "basil", "compost", "seedlings", "watering", "trellis"],
    "kitchen": ["sourdough", "starter", "oven", "flour", "proofing", "crust"],
    "travel": ["passport", "flight", "luggage", "hotel", "itinerary", "visa"],
    "music": ["guitar", "chords", "metronome", "scales", "strings", "tuning"],
    "cycling": ["saddle", "chain", "gears", "helmet", "tyres", "cadence"],
    "finance": ["budget", "invoice", "savings", "taxes", "receipts", "pension"],
}


def corpus() -> list[tuple[str, str]]:
    """(content, timestamp): three days; each day's twelve rows (two per topic) span 22 minutes.

    So temporal positives mix topics and same-topic rows on other days are nulls: the null
    and positive score distributions overlap, which is what makes beta matter.
    """
    rows = []
    for ti, (topic, words) in enumerate(TOPICS.items()):
        for wi, word in enumerate(words):
            stamp = f"2024-03-{wi // 2 + 1:02d}T10:{ti * 4 + (wi % 2) * 2:02d}:00Z"
            rows.append((f"{topic} log: {word} and {words[(wi + 1) % 6]} today", stamp))
    return rows


# -- fixtures ---------------------------------------------------------------------------------


async def fill(
    tools: Tools, agent_id: str = "a", rows: list[tuple[str, str]] | None = None
) -> None:
    for content, stamp in corpus() if rows is None else rows:
        out = await tools(
            "store", {"agent_id": agent_id, "message": {"content": content, "timestamp": stamp}}
        )
        assert out["result"] == "stored", out


@pytest.fixture
def db_path(tmp_path: Path) -> str:
    """The database of the engines `make_engine` makes (its default `db_path`)."""
    return str(tmp_path / "mem.db")


# -- the independent oracle -------------------------------------------------------------------


def vectors(rows: list[tuple[str, str]]) -> np.ndarray:
    return HashingProvider().embed([content for content, _ in rows]).astype(np.float64)


def null_scores(v: np.ndarray) -> np.ndarray:
    return (v @ v.T)[np.triu_indices(v.shape[0], k=1)]


def oracle_sep(x: np.ndarray, y: np.ndarray, floor: float, beta: float) -> tuple[float, float]:
    lo, hi = min(x.min(), y.min()), max(x.max(), y.max())
    best = None
    for c in np.linspace(lo, hi, 256):
        tpr, fpr = float(np.mean(y >= c)), float(np.mean(x >= c))
        value = tpr + beta * (1 - fpr)
        if best is None or value > best[0]:
            best = (value, float(c), tpr - fpr)
    assert best is not None
    return max(best[1], floor), best[2]


def temporal(rows: list[tuple[str, str]], v: np.ndarray, window_s: float = 1800) -> np.ndarray:
    order = sorted(range(len(rows)), key=lambda i: datetime.fromisoformat(rows[i][1]))
    out = []
    for i, j in itertools.pairwise(order):
        gap = datetime.fromisoformat(rows[j][1]) - datetime.fromisoformat(rows[i][1])
        if gap.total_seconds() <= window_s:
            a, b = v[i] / np.linalg.norm(v[i]), v[j] / np.linalg.norm(v[j])
            out.append(float(a @ b))
    return np.array(out)


def close(a: float, b: float) -> bool:
    return abs(a - b) <= 1.01e-4  # both sides are round_4 of values equal up to float noise


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


# -- the sidecar and startup ------------------------------------------------------------------


def sidecar(db_path: str) -> dict[str, Any]:
    return json.loads(Path(db_path + ".calibration.json").read_text())


async def test_sidecar_written_owner_only(connect: Callable[..., Any], db_path: str) -> None:
    async with connect(recall_mode="rsf") as tools:
        await fill(tools)
        out = await tools("set_recall_precision", {"agent_id": "a", "precision": "strict"})
        glob = await tools("calibrate_threshold", {"agent_id": "", "method": "zscore"})
    path = Path(db_path + ".calibration.json")
    assert path.stat().st_mode & 0o777 == 0o600
    data = sidecar(db_path)
    assert list(data) == [
        "embedding_dim",
        "embedding_model",
        "scoring_version",
        "global_threshold",
        "agent_thresholds",
        "global_fused_gate",
        "agent_fused_gates",
        "fused_gate_signal",
        "agent_betas",
        "calibrated_at",
    ]
    assert data["embedding_dim"] == 384 and data["scoring_version"] == SCORING_VERSION
    assert data["embedding_model"] == "hashing:384"
    assert data["global_threshold"] == glob["new_threshold"]
    assert data["agent_thresholds"] == {"a": out["calibrate"]["new_threshold"]}
    assert data["agent_fused_gates"] == {"a": out["fused_gate"]["threshold"]}
    assert data["fused_gate_signal"] == "rsf" and data["agent_betas"] == {"a": 2.0}
    assert datetime.fromisoformat(data["calibrated_at"]).utcoffset() is not None
    assert not [p for p in os.listdir(path.parent) if ".tmp." in p]


async def test_sidecar_restored_after_restart(
    connect: Callable[..., Any], make_engine: Callable[..., Engine], db_path: str
) -> None:
    async with connect(recall_mode="rsf") as tools:
        await fill(tools)
        await tools("set_recall_precision", {"agent_id": "a", "precision": "strict"})
        await tools("calibrate_threshold", {"agent_id": "", "method": "zscore"})
        first = tools.engine.thresholds
    stored = sidecar(db_path)
    async with connect(recall_mode="rsf") as tools:
        assert tools.engine.thresholds.agent_fused_gates == {}  # nothing until startup runs
        thread = tools.engine.start_calibration()
        assert thread is not None
        thread.join()
        t = tools.engine.thresholds
        assert (
            t.global_threshold,
            t.agent_thresholds,
            t.agent_fused_gates,
            t.fused_gate_signal,
            t.agent_betas,
        ) == (
            first.global_threshold,
            first.agent_thresholds,
            first.agent_fused_gates,
            first.fused_gate_signal,
            first.agent_betas,
        )
        get = await tools("get_recall_precision", {"agent_id": "a"})
        assert (get["precision"], get["overridden"]) == ("strict", True)
    assert sidecar(db_path) == stored  # a plain restore rewrites nothing
    assert not tools.engine.calibrator.sidecar.backups()


def write_sidecar(db_path: str, **changes: Any) -> dict[str, Any]:
    data = {
        "embedding_dim": 384,
        "embedding_model": "old",
        "scoring_version": SCORING_VERSION,
        "global_threshold": 0.4242,
        "agent_thresholds": {"a": 0.4343},
        "global_fused_gate": None,
        "agent_fused_gates": {"a": 0.4444},
        "fused_gate_signal": "rsf",
        "agent_betas": {"a": 2.0},
        "calibrated_at": "2024-01-01T00:00:00+00:00",
        **changes,
    }
    Path(db_path + ".calibration.json").write_text(json.dumps(data))
    return data


async def seeded(make_engine: Callable[..., Engine]) -> None:
    engine = make_engine(recall_mode="rsf")
    async with in_memory(engine) as tools:
        await fill(tools)


async def test_startup_restores_current_values(
    make_engine: Callable[..., Engine], db_path: str
) -> None:
    await seeded(make_engine)
    write_sidecar(db_path)
    engine = make_engine(recall_mode="rsf")
    assert engine.calibrator.startup() == []  # restored, no calibration
    t = engine.thresholds
    assert (t.global_threshold, t.agent_thresholds, t.agent_fused_gates, t.agent_betas) == (
        0.4242,
        {"a": 0.4343},
        {"a": 0.4444},
        {"a": 2.0},
    )


@pytest.mark.parametrize("change", [{"scoring_version": "old-version"}, {"embedding_dim": 768}])
async def test_startup_recalibrates_stale_or_resized(
    make_engine: Callable[..., Engine], db_path: str, change: dict[str, Any]
) -> None:
    await seeded(make_engine)
    old = write_sidecar(db_path, **change)
    engine = make_engine(recall_mode="rsf")
    assert engine.calibrator.startup() == ["", "a"]
    t = engine.thresholds
    assert t.global_threshold != 0.4242 and t.agent_thresholds["a"] != 0.4343
    assert t.agent_betas == {"a": 2.0}  # precision is policy: it survives
    assert t.agent_fused_gates["a"] == engine.calibrator.fused_gate("a", 2.0)["threshold"]
    new = sidecar(db_path)
    assert new["scoring_version"] == SCORING_VERSION and new["embedding_dim"] == 384
    assert new["agent_betas"] == {"a": 2.0}
    ((backup, label, _),) = engine.calibrator.sidecar.backups()
    assert label == old["scoring_version"]
    assert json.loads(Path(backup).read_text()) == old
    assert Path(backup).stat().st_mode & 0o777 == 0o600


async def test_startup_backs_up_an_unreadable_sidecar(
    make_engine: Callable[..., Engine], db_path: str
) -> None:
    await seeded(make_engine)
    Path(db_path + ".calibration.json").write_text("{not json")
    engine = make_engine(recall_mode="rsf")
    assert engine.calibrator.startup() == ["", "a"]
    ((backup, label, _),) = engine.calibrator.sidecar.backups()
    assert label == "unreadable" and Path(backup).read_text() == "{not json"
    assert sidecar(db_path)["scoring_version"] == SCORING_VERSION


async def test_startup_leaves_stale_values_unapplied_without_model_change_recalibration(
    make_engine: Callable[..., Engine], db_path: str
) -> None:
    await seeded(make_engine)
    write_sidecar(db_path, scoring_version="old-version")
    engine = make_engine(recall_mode="rsf", calibrate_on_model_change=False)
    assert engine.calibrator.startup() == []
    assert engine.thresholds.global_threshold == 0.3 and engine.thresholds.agent_thresholds == {}
    assert sidecar(db_path)["scoring_version"] == "old-version"


async def test_startup_calibrates_the_gate_when_no_signal_was_stored(
    make_engine: Callable[..., Engine], db_path: str
) -> None:
    await seeded(make_engine)
    write_sidecar(db_path, fused_gate_signal=None, agent_fused_gates={})
    engine = make_engine(recall_mode="rsf")
    assert engine.calibrator.startup() == ["", "a"]
    assert engine.thresholds.fused_gate_signal == "rsf"
    assert not engine.calibrator.sidecar.backups()


async def test_startup_needs_embeddings(make_engine: Callable[..., Engine], db_path: str) -> None:
    await seeded(make_engine)
    write_sidecar(db_path)
    engine = make_engine(embedder=NoneProvider(), embedding_mode="none")
    assert engine.start_calibration() is None
    assert engine.thresholds.agent_thresholds == {}


async def test_sidecar_merges_with_another_process(
    make_engine: Callable[..., Engine], db_path: str
) -> None:
    rows = corpus()
    engine_a = make_engine()
    engine_b = make_engine()  # a second server process on the same database file
    async with in_memory(engine_a) as tools:
        await fill(tools, "a", rows[:18])
        await fill(tools, "b", rows[18:])
    assert engine_a.calibrator.calibrate("a")["sidecar_persisted"]
    assert engine_b.calibrator.calibrate("b")["sidecar_persisted"]
    assert set(sidecar(db_path)["agent_thresholds"]) == {"a", "b"}  # b carried a forward
    assert engine_a.calibrator.forget_agent("a")  # delete_agent_data's hook
    data = sidecar(db_path)
    assert set(data["agent_thresholds"]) == {"b"} and "a" not in data["agent_fused_gates"]
    assert engine_a.thresholds.vector_threshold("a") == 0.3


async def test_memory_database_keeps_no_sidecar(
    make_engine: Callable[..., Engine], tmp_path: Path
) -> None:
    engine = make_engine(db_path=":memory:")
    async with in_memory(engine) as tools:
        await fill(tools)
        out = await tools("calibrate_threshold", {"agent_id": "a"})
    assert out["ok"] is True and out["sidecar_persisted"] is False
    assert engine.thresholds.agent_thresholds["a"] == out["new_threshold"]
    assert not [p for p in os.listdir(tmp_path) if "calibration" in p]


#: What `back_up_seven_then_v6_again` leaves: one backup a label, the newest five, v6's the later.
NEWEST_FIVE = [
    ("v2", "20240101-000002"),
    ("v3", "20240101-000003"),
    ("v4", "20240101-000004"),
    ("v5", "20240101-000005"),
    ("v6", "20240101-000100"),
]


def back_up_seven_then_v6_again(car: Any) -> str | None:
    """Backups labelled v0 to v6 a second apart, then v6 again a minute on (replacing the
    older v6); returns the last backup's key."""
    for i in range(7):
        car.backup(f"v{i}", datetime(2024, 1, 1, 0, 0, i, tzinfo=UTC))
    return car.backup("v6", datetime(2024, 1, 1, 0, 1, 0, tzinfo=UTC))


def test_sidecar_backups_keep_one_per_version_and_the_newest_five(tmp_path: Path) -> None:
    from cpersona.retrieval.sidecar import Sidecar

    path = tmp_path / "x.db.calibration.json"
    path.write_text("{}")
    car = Sidecar(str(path))
    back_up_seven_then_v6_again(car)
    assert sorted((label, stamp) for _, label, stamp in car.backups()) == NEWEST_FIVE


async def test_startup_gives_way_to_calls_and_calibrates_the_same(
    make_engine: Callable[..., Engine], db_path: str
) -> None:
    """Start-up calibration while a caller's call stays in flight (yielding.py): it waits
    between its steps (bounded by its busy share) and ends with exactly the values of a run
    that never waited; a calibrate_threshold call queued behind it is not held back."""
    await seeded(make_engine)
    quiet = make_engine(recall_mode="rsf")
    quiet.calibrator.activity = None  # the reference: a run that gives way to nothing
    assert quiet.calibrator.startup() == ["", "a"]
    expected = calibrated_values(quiet)
    Path(db_path + ".calibration.json").unlink()

    busy = make_engine(recall_mode="rsf")
    with busy.activity.call():  # a caller's call, in flight while the run starts
        run = busy.start_calibration()
        assert run is not None
        give_way = None
        for _ in range(1200):  # until the run has read the (absent) sidecar and waited once
            give_way = busy.calibrator._give_way
            if (give_way is not None and give_way.waited > 0) or not run.is_alive():
                break
            time.sleep(0.05)
        assert give_way is not None and give_way.waited > 0
        # A caller of calibrate_threshold queues behind the run: it is answered.
        answered = busy.calibrator.calibrate("a")
        assert answered["ok"] is True
    run.join(timeout=120)
    assert not run.is_alive()
    assert calibrated_values(busy) == expected


def calibrated_values(engine: Engine) -> dict[str, Any]:
    t = engine.thresholds
    return {f.name: getattr(t, f.name) for f in dataclasses.fields(t) if f.name != "lock"}
