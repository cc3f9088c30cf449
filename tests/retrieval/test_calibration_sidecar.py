"""The calibration sidecar and start-up calibration (retrieval.md §15.5-15.6).

A file beside a SQLite database (`<db>.calibration.json`, owner-only): what it holds, how a
restart restores it, when start-up recalibrates and backs the old file up, how two processes
merge their entries, and that start-up calibration gives way to callers' calls. The corpus and
its helpers are calibration_support.py's.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from calibration_support import NEWEST_FIVE, back_up_seven_then_v6_again, corpus, fill
from cpersona.embedding.none import NoneProvider
from cpersona.engine import Engine
from cpersona.retrieval.sidecar import SCORING_VERSION
from support.mcp_client import in_memory

pytestmark = [pytest.mark.anyio, pytest.mark.runs_on(kernel="rust", store_backend="sqlite")]


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
