"""Retrieval-quality tools: calibrate_threshold, set_recall_precision, get_recall_precision."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from cpersona.config import PRECISION_BETAS, Settings
from cpersona.retrieval.thresholds import MIN_EMBEDDINGS
from cpersona.server.registry import Annotations, ToolSpec
from cpersona.server.tools.memory import SESSION_KEY, STR
from cpersona.session import marked

if TYPE_CHECKING:
    from cpersona.engine import Engine


def _marked(
    engine: Engine, tool: str, a: dict[str, Any], run: Callable[[bool], dict[str, Any]]
) -> dict[str, Any]:
    """Run a calibration service; while paused it validates, writes nothing, and is marked.

    surface.md §1.5: these tools validate their arguments before the pause check, so a bad
    request is refused even while paused; a valid one answers the skip shape.
    """
    state = engine.pause.active(a["session_key"])
    result: dict[str, Any] = run(state is not None)
    if state is not None and result.get("ok"):
        return marked(tool, state, result)
    return result


def _calibrate(engine: Engine, a: dict[str, Any]) -> dict[str, Any]:
    def run(paused: bool) -> dict[str, Any]:
        result: dict[str, Any] = engine.calibrator.calibrate(
            a["agent_id"],
            sample_size=a["sample_size"],
            z_factor=a["z_factor"],
            method=a["method"],
            percentile=a["percentile"],
            paused=paused,
        )
        return result

    return _marked(engine, "calibrate_threshold", a, run)


def _set_precision(engine: Engine, a: dict[str, Any]) -> dict[str, Any]:
    def run(paused: bool) -> dict[str, Any]:
        result: dict[str, Any] = engine.calibrator.set_precision(
            a["agent_id"], a["precision"], a["beta"], paused=paused
        )
        return result

    return _marked(engine, "set_recall_precision", a, run)


def _get_precision(engine: Engine, a: dict[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = engine.calibrator.get_precision(a["agent_id"])
    return result


def _levels() -> str:
    return ", ".join(f"{name} = {beta:g}" for name, beta in PRECISION_BETAS.items())


def tools(settings: Settings) -> list[ToolSpec]:
    s = settings
    return [
        ToolSpec(
            name="calibrate_threshold",
            description=(
                "Re-derive the vector similarity threshold from this database's own "
                "embeddings: random pairs of stored memories give the score of unrelated "
                "text, and the threshold is set where it separates them from related text "
                "(`separation`, the default: memories written within "
                f"{s.calibrate_temporal_window_min:g} minutes of each other, else nearest "
                "neighbours), at the `percentile` of unrelated scores (0.95 or 95 both mean "
                "95%), or at mean + `z_factor` standard deviations. `agent_id` '' calibrates "
                "the global threshold over every agent; a named agent also gets its fused "
                "gate (the cut recall applies to confidence / rsf / rrf scores) recalibrated "
                "at its precision. Samples up to `sample_size` memories (default "
                f"{s.calibrate_sample_size}, at most {s.calibrate_max_sample}); needs at "
                f"least {MIN_EMBEDDINGS} embedded memories of one width. Results apply at "
                "once and are kept in the calibration sidecar. Random sample: repeated calls "
                "may differ."
            ),
            properties={
                "agent_id": STR,
                "sample_size": {
                    "type": "integer",
                    "default": 0,
                    "description": "0 = the configured sample size.",
                },
                "z_factor": {
                    "type": "number",
                    "default": 0,
                    "description": "zscore only; 0 = configured; clamped to [-10, 10].",
                },
                "method": {
                    "type": "string",
                    "enum": ["separation", "percentile", "zscore"],
                    "description": "Omitted = the configured method.",
                },
                "percentile": {
                    "type": "number",
                    "default": 0,
                    "description": "percentile method; in (0, 1], or a percent "
                    "1-100; 0 = configured.",
                },
                "session_key": SESSION_KEY,
            },
            required=("agent_id",),
            handler=_calibrate,
            annotations=Annotations(read_only=False, destructive=False, idempotent=False),
        ),
        ToolSpec(
            name="set_recall_precision",
            description=(
                "Set how strict recall's quality gate is for one agent: this is the knob that "
                "moves the fused gate (under rrf or rsf without confidence scoring, autocut "
                "never trims, so this gate is what decides which weak rows are dropped). "
                f"`precision`: {_levels()} (case-insensitive); or a custom `beta` > 0, which "
                "wins. beta weighs rejecting unrelated rows against keeping related ones: "
                "higher = stricter gate (fewer stray rows, more misses); it does not set a "
                "threshold directly. Neither given clears the agent's override back to the "
                "server default. The agent is recalibrated at once; if that cannot run (too "
                "few embeddings) the override is rolled back and `ok` is false."
            ),
            properties={
                "agent_id": STR,
                "precision": {"type": "string", "description": "strict, balanced or lenient."},
                "beta": {
                    "type": "number",
                    "default": 0,
                    "description": "> 0 overrides `precision`.",
                },
                "session_key": SESSION_KEY,
            },
            required=("agent_id",),
            handler=_set_precision,
            annotations=Annotations(read_only=False, destructive=False, idempotent=True),
        ),
        ToolSpec(
            name="get_recall_precision",
            description=(
                "Read one agent's effective recall precision: its `beta` and label "
                "(strict / balanced / lenient / custom), whether it is an override set with "
                "set_recall_precision, and the server-wide default. Read-only."
            ),
            properties={"agent_id": STR},
            required=("agent_id",),
            handler=_get_precision,
            annotations=Annotations(read_only=True),
        ),
    ]
