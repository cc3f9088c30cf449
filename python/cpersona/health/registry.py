"""The `check_health` registry and answer (surface.md §9.1, §9.2, §1.4).

The 32 check names of CPersona 2.5.x run in their order, then cpersona's own
`embedding_model` and `stored_credentials` (issue 22). Each topic module of health/checks/
declares its checks (detector, repair, applicability, issue types); this module puts the
modules in the order of the answer. How a run goes is health/runner.py's: a fix run repairs,
then the same checks re-run read-only, and `severity_summary` and `status` judge that
residual state while `issues` keeps the fix run's findings and what each repair did.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from cpersona.health import credentials, runner
from cpersona.health.check import Check
from cpersona.health.checks import (
    content,
    embeddings,
    fields,
    host,
    model,
    records,
    structure,
    timestamps,
)
from cpersona.health.context import HealthContext
from cpersona.storage.upkeep.handle import axis_counts, count, db_size, reading

SEVERITIES = ("critical", "warn", "info")
SKIP_REASON = "no-persist mode active — fix downgraded to fix=False"

REGISTRY: tuple[Check[Any], ...] = (
    *content.CHECKS,
    *embeddings.CHECKS,
    *structure.CHECKS,
    *fields.CHECKS,
    *timestamps.CHECKS,
    *records.CHECKS,
    *host.CHECKS,
    *model.CHECKS,
    *credentials.CHECKS,
)
BY_NAME = {c.name: c for c in REGISTRY}
NAMES = tuple(BY_NAME)
REPORT_ONLY = tuple(c.name for c in REGISTRY if not c.fixable)


def verdict(summary: dict[str, int]) -> str:
    """surface.md §1.4: any critical -> unhealthy; else any warn -> degraded; else healthy."""
    if summary.get("critical"):
        return "unhealthy"
    if summary.get("warn"):
        return "degraded"
    return "healthy"


def summarise(issues: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """Issues (as answered) per severity."""
    counts = dict.fromkeys(SEVERITIES, 0)
    for i in issues:
        counts[i["severity"]] = counts.get(i["severity"], 0) + 1
    return counts


def unknown_names(requested: Sequence[Any], valid: Sequence[str] = NAMES) -> dict[str, Any] | None:
    """The refusal of a request naming checks that do not exist, or None."""
    unknown = [n for n in dict.fromkeys(requested) if n not in valid]
    if not unknown:
        return None
    return {
        "ok": False,
        "error": f"unknown check name(s): {', '.join(map(str, unknown))}. "
        f"Valid names: {', '.join(valid)}",
        "unknown_checks": unknown,
        "valid_checks": list(valid),
        "checks_run": [],
    }


def selected(requested: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(requested)) if requested else list(NAMES)


def _chosen(names: Sequence[str]) -> list[Check[Any]]:
    """The checks named, in registry order."""
    return [c for c in REGISTRY if c.name in names]


def report_findings(ctx: HealthContext, names: Sequence[str]) -> list[dict[str, Any]]:
    """One read-only pass over `names`, as answered."""
    return [i.to_json() for i in runner.report(ctx, _chosen(names))]


def stats(ctx: HealthContext) -> dict[str, Any]:
    c, agent = reading(ctx.db), ctx.agent_id
    out: dict[str, Any] = {
        "db_size_bytes": db_size(c),
        "memories": count(c, "memories", agent),
        "episodes": count(c, "episodes", agent),
        "profiles": count(c, "profiles", agent),
        "pending_tasks": count(c, "pending_memory_tasks", agent),
        "axes": {
            axis: {v or "(global)": n for v, n in axis_counts(c, axis, agent)}
            for axis in ("project_id", "channel")
        },
    }
    if agent:
        out["agent_memories"] = out["memories"]
        out["agent_episodes"] = out["episodes"]
    return out


def check_health(
    ctx: HealthContext,
    *,
    requested: Sequence[Any] = (),
    fix: bool = False,
    paused: bool = False,
    extra_issues: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """The `check_health` answer (no `ok` key on success). `extra_issues` are findings from
    outside the registry (update_status), as answered."""
    refusal = unknown_names(requested)
    if refusal is not None:
        return refusal
    names = selected([str(n) for n in requested])
    chosen = _chosen(names)
    effective = fix and not paused
    if ctx.embedder is not None and ctx.dim is None:
        ctx.dim = ctx.embedder.dim()
    if effective:
        issues = [i.to_json() for i in runner.fix_run(ctx, chosen)]
        residual = [i.to_json() for i in runner.report(ctx, chosen)]
    else:
        issues = residual = [i.to_json() for i in runner.report(ctx, chosen)]
    extra = [dict(i) for i in extra_issues]
    summary = summarise(residual + extra)
    out: dict[str, Any] = {
        "total_memories": count(reading(ctx.db), "memories", ctx.agent_id),
        "issues": issues + extra,
        "severity_summary": summary,
        "status": verdict(summary),
        "fixed": effective,
        "checks_run": names,
        "stats": stats(ctx),
    }
    if fix and paused:
        out["repairs_skipped"] = True
        out["repairs_skip_reason"] = SKIP_REASON
    return out
