"""Retrieval-quality tools: calibrate_threshold, set_recall_precision, get_recall_precision."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cpersona.config import PRECISION_BETAS, Settings
from cpersona.retrieval.thresholds import MIN_EMBEDDINGS
from cpersona.server.access import Access
from cpersona.server.registry import APPENDS, EDITS, READS, ToolSpec, arg
from cpersona.server.tools.browse import AgentArgs
from cpersona.server.tools.memory import SESSION_KEY, STR
from cpersona.session import marked

if TYPE_CHECKING:
    from cpersona.engine import Engine


@dataclass(frozen=True)
class CalibrateArgs:
    agent_id: str = arg(STR, required=True)
    sample_size: int = arg(
        {"type": "integer", "default": 0, "description": "0 = the configured sample size."}
    )
    z_factor: float = arg(
        {
            "type": "number",
            "default": 0,
            "description": "zscore only; 0 = configured; clamped to [-10, 10].",
        }
    )
    method: str = arg(
        {
            "type": "string",
            "enum": ["separation", "percentile", "zscore"],
            "description": "Omitted = the configured method.",
        }
    )
    percentile: float = arg(
        {
            "type": "number",
            "default": 0,
            "description": "percentile method; in (0, 1], or a percent 1-100; 0 = configured.",
        }
    )
    session_key: str = arg(SESSION_KEY)


@dataclass(frozen=True)
class SetPrecisionArgs:
    agent_id: str = arg(STR, required=True)
    precision: str = arg({"type": "string", "description": "strict, balanced or lenient."})
    beta: float = arg({"type": "number", "default": 0, "description": "> 0 overrides `precision`."})
    session_key: str = arg(SESSION_KEY)


def _marked(
    engine: Engine, tool: str, session_key: str, run: Callable[[bool], dict[str, Any]]
) -> dict[str, Any]:
    """Run a calibration service; while paused it validates, writes nothing, and is marked.

    surface.md §1.5: these tools validate their arguments before the pause check, so a bad
    request is refused even while paused; a valid one answers the skip shape.
    """
    state = engine.pause.active(session_key)
    result: dict[str, Any] = run(state is not None)
    if state is not None and result.get("ok"):
        return marked(tool, state, result)
    return result


def _calibrate(engine: Engine, a: CalibrateArgs) -> dict[str, Any]:
    def run(paused: bool) -> dict[str, Any]:
        result: dict[str, Any] = engine.calibrator.calibrate(
            a.agent_id,
            sample_size=a.sample_size,
            z_factor=a.z_factor,
            method=a.method,
            percentile=a.percentile,
            paused=paused,
        )
        return result

    return _marked(engine, "calibrate_threshold", a.session_key, run)


def _set_precision(engine: Engine, a: SetPrecisionArgs) -> dict[str, Any]:
    def run(paused: bool) -> dict[str, Any]:
        result: dict[str, Any] = engine.calibrator.set_precision(
            a.agent_id, a.precision, a.beta, paused=paused
        )
        return result

    return _marked(engine, "set_recall_precision", a.session_key, run)


def _get_precision(engine: Engine, a: AgentArgs) -> dict[str, Any]:
    result: dict[str, Any] = engine.calibrator.get_precision(a.agent_id)
    return result


def _levels() -> str:
    return ", ".join(f"{name} = {beta:g}" for name, beta in PRECISION_BETAS.items())


def _calibrate_description(s: Settings) -> str:
    return (
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
    )


_ABOUT_SET_RECALL_PRECISION = (
    "Set how strict recall's quality gate is for one agent: this is the knob that "
    "moves the fused gate (under rrf or rsf without confidence scoring, autocut "
    "never trims, so this gate is what decides which weak rows are dropped). "
    f"`precision`: {_levels()} (case-insensitive); or a custom `beta` > 0, which "
    "wins. beta weighs rejecting unrelated rows against keeping related ones: "
    "higher = stricter gate (fewer stray rows, more misses); it does not set a "
    "threshold directly. Neither given clears the agent's override back to the "
    "server default. The agent is recalibrated at once; if that cannot run (too "
    "few embeddings) the override is rolled back and `ok` is false."
)
_ABOUT_GET_RECALL_PRECISION = (
    "Read one agent's effective recall precision: its `beta` and label "
    "(strict / balanced / lenient / custom), whether it is an override set with "
    "set_recall_precision, and the server-wide default. Read-only."
)

# Each: name, position, description, arguments, access, handler, hints (ToolSpec's fields).
TOOLS = (
    ToolSpec(
        "calibrate_threshold",
        15,
        _calibrate_description,
        CalibrateArgs,
        Access.write(sweeping=True),
        _calibrate,
        APPENDS,
    ),
    ToolSpec(
        "set_recall_precision",
        16,
        _ABOUT_SET_RECALL_PRECISION,
        SetPrecisionArgs,
        Access.write(),
        _set_precision,
        EDITS,
    ),
    ToolSpec(
        "get_recall_precision",
        17,
        _ABOUT_GET_RECALL_PRECISION,
        AgentArgs,
        Access.read(),
        _get_precision,
        READS,
    ),
)
