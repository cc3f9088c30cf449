"""The `check_health` registry and its runner (surface.md §9.1, §9.2, §1.4).

The 32 check names of CPersona 2.5.x run in their order, then cpersona's own
`embedding_model` and `stored_credentials` (issue 22). A report-only run reads. A fix run
(surface.md §9.1 "fix-run mechanics"):

1. computes every embedding it will need before taking the write lock (the backend probe,
   the re-embeds of rows without vectors, the model probe);
2. runs `sqlite_integrity` outside the lock;
3. runs the other checks in one transaction, each detection followed by its repair in its
   own savepoint (a failing repair is rolled back alone and reported as `fix_error`);
4. after the commit: rebuilds the vector index files a check found wrong, and re-embeds the
   rows the repairs left without a vector (second pass, outside the lock);
5. re-runs the same checks read-only: `severity_summary` and `status` judge that residual
   state, while `issues` keeps the fix run's findings and what each repair did.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from cpersona.errors import EmbeddingMisconfigured, EmbeddingUnavailable
from cpersona.health import checks, credentials
from cpersona.health.checks import Issue
from cpersona.health.context import HealthContext, Probe
from cpersona.health.repairs import AFTER_COMMIT, REPAIRS
from cpersona.storage import health as sql

log = logging.getLogger("cpersona.health")

SEVERITIES = ("critical", "warn", "info")
SKIP_REASON = "no-persist mode active — fix downgraded to fix=False"
REVIEW_HINT = (
    "nothing here can be repaired automatically (locked rows, or no way to "
    "compute a fix); review it by hand"
)


@dataclass(frozen=True, slots=True)
class Check:
    name: str
    severity: str  # the base severity of surface.md §9.2 (a finding may say otherwise)
    detect: Callable[[HealthContext], list[Issue]]

    @property
    def fixable(self) -> bool:
        return self.name in REPAIRS


REGISTRY: tuple[Check, ...] = (
    Check("memory_annotation", "info", checks.memory_annotation),
    Check("discord_mention", "info", checks.discord_mention),
    Check("oversized_content", "warn", checks.oversized_content),
    Check("duplicate_content", "warn", checks.duplicate_content),
    Check("embedding_dimension", "critical", checks.embedding_dimension),
    Check("nonfinite_embedding", "warn", checks.nonfinite_embedding),
    Check("embedding_backend", "info", checks.embedding_backend),
    Check("null_embedding", "warn", checks.null_embedding),
    Check("null_episode_embedding", "warn", checks.null_episode_embedding),
    Check("fts_integrity", "warn", checks.fts_integrity),
    Check("schema_version", "critical", checks.schema_version),
    Check("dedup_msg_id_index", "critical", checks.dedup_msg_id_index),
    Check("schema_objects", "critical", checks.schema_objects),
    Check("sqlite_integrity", "critical", checks.sqlite_integrity),
    Check("axis_hygiene", "warn", checks.axis_hygiene),
    Check("invalid_json", "warn", checks.invalid_json),
    Check("invalid_timestamp", "warn", checks.invalid_timestamp),
    Check("future_timestamp", "warn", checks.future_timestamp),
    Check("missing_episode_start_time", "info", checks.missing_episode_start_time),
    Check("timestamp_format_drift", "warn", checks.timestamp_format_drift),
    Check("episode_timestamp_format_drift", "warn", checks.episode_timestamp_format_drift),
    Check("stale_pending_tasks", "warn", checks.stale_pending_tasks),
    Check("missing_profile", "info", checks.missing_profile),
    Check("empty_content", "warn", checks.empty_content),
    Check("invalid_source_type", "warn", checks.invalid_source_type),
    Check("oversized_profile", "warn", checks.oversized_profile),
    Check("anonymous_source", "info", checks.anonymous_source),
    Check("vector_fallback_config", "info", checks.vector_fallback_config),
    Check("vector_index", "warn", checks.vector_index),
    Check("operating_context_parse", "warn", checks.operating_context_parse),
    Check("operating_context_size", "info", checks.operating_context_size),
    Check("file_permissions", "warn", checks.file_permissions),
    Check("embedding_model", "warn", checks.embedding_model),
    Check(credentials.CHECK, "warn", credentials.detect),
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


def summarise(issues: Sequence[Issue]) -> dict[str, int]:
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


def _review(issue: Issue) -> Issue:
    # The repairable policy: a finding no fix can touch asks for a human and never degrades.
    if issue.get("repairable", -1) == 0:
        issue["needs_human_review"] = True
        issue.setdefault("hint", REVIEW_HINT)
        if issue["severity"] == "warn":
            issue["severity"] = "info"
    return issue


def _crashed(name: str, exc: BaseException) -> Issue:
    log.exception("health check %s crashed", name)
    return {
        "type": "check_crashed",
        "check_name": name,
        "check": name,
        "detail": f"{type(exc).__name__}: {exc}",
        "severity": "warn",
    }


def run_checks(ctx: HealthContext, names: Sequence[str]) -> list[Issue]:
    """One read-only pass over `names` in registry order."""
    ctx.fix, ctx.handle = False, None
    ctx.scratch.clear()
    out: list[Issue] = []
    absent = sql.not_applicable(ctx.db)
    for check in REGISTRY:
        if check.name not in names:
            continue
        if check.name in absent:
            out.append(checks.not_applicable(check.name, absent[check.name]))
            continue
        try:
            out += [_review(i) for i in check.detect(ctx)]
        except Exception as exc:
            out.append(_crashed(check.name, exc))
    return out


# -- the fix run -------------------------------------------------------------------------------


def _prepare(ctx: HealthContext, names: Sequence[str]) -> None:
    """Every embedding the fix run needs, computed before the write lock is taken."""
    ctx.reembed_budget = ctx.settings.reembed_row_cap
    if ctx.embedder is None:
        return
    try:
        # A fresh text each run: a cached answer would prove nothing about the backend.
        vectors = ctx.embed([f"cpersona health probe {time.time_ns()}"])
        ctx.probe = Probe(ran=True)
        if ctx.dim is None and vectors and vectors[0] is not None:
            ctx.dim = len(vectors[0]) // 4
    except EmbeddingUnavailable as exc:
        ctx.probe = Probe(
            ran=True, error=str(exc), misconfigured=isinstance(exc, EmbeddingMisconfigured)
        )
        return
    for name, table in (("null_embedding", "memories"), ("null_episode_embedding", "episodes")):
        if name not in names or (table == "memories" and not ctx.stores_blobs):
            continue
        if not ctx.takes_configured_vectors(table):
            continue  # another model's vectors: `cpersona reembed` fills these rows
        rows = sql.texts_to_embed(sql.reading(ctx.db), table, ctx.agent_id, ctx.reembed_budget)
        blobs, error = ctx.try_embed([text for _, text in rows])
        if error is not None:
            ctx.scratch[f"reembed_error:{table}"] = error
        # `blobs` is empty when the backend failed: nothing is prepared then.
        pairs = zip(rows, blobs, strict=False)
        ctx.prepared[table] = [(i, b) for (i, _), b in pairs if b is not None]
        ctx.reembed_budget -= len(ctx.prepared[table])
    if "embedding_model" in names:
        ctx.model_probe = checks.probe_model(ctx)


def _repair(ctx: HealthContext, name: str, issues: list[Issue]) -> None:
    if not any(i.get("repairable", 0) != 0 for i in issues):
        return
    try:
        if name in AFTER_COMMIT:
            REPAIRS[name](ctx, issues)
        else:
            assert ctx.handle is not None, "repairs run inside the fix transaction"
            with ctx.handle.step():  # a savepoint: a failing repair is rolled back alone
                REPAIRS[name](ctx, issues)
    except Exception as exc:
        log.exception("health repair %s failed", name)
        for i in issues:
            i.pop("_nulled", None)
            i.pop("_nulled_tables", None)
            i["fixed"] = False
            i["fix_error"] = f"{type(exc).__name__}: {exc}"


def _detect_and_repair(ctx: HealthContext, check: Check) -> list[Issue]:
    absent = sql.not_applicable(ctx.db)
    if check.name in absent:
        return [checks.not_applicable(check.name, absent[check.name])]
    try:
        issues = check.detect(ctx)
    except Exception as exc:
        return [_crashed(check.name, exc)]
    if check.fixable and issues:
        _repair(ctx, check.name, issues)
    return issues


def _fix_run(ctx: HealthContext, names: Sequence[str]) -> list[Issue]:
    _prepare(ctx, names)
    found: dict[str, list[Issue]] = {}
    saved = dict(ctx.scratch)
    if "sqlite_integrity" in names:  # outside the lock (a long read)
        found["sqlite_integrity"] = run_checks(ctx, ["sqlite_integrity"])
    ctx.fix = True
    with sql.fixing(ctx.db) as handle:
        ctx.handle = handle
        ctx.scratch.update(saved)
        for check in REGISTRY:
            if check.name not in names or check.name in found or check.name in AFTER_COMMIT:
                continue
            found[check.name] = _detect_and_repair(ctx, check)
    ctx.handle = None
    # The derived index files are judged after the commit, against the repaired rows.
    for check in REGISTRY:
        if check.name in names and check.name in AFTER_COMMIT:
            found[check.name] = _detect_and_repair(ctx, check)
    _second_pass(ctx, [i for issues in found.values() for i in issues])
    return [_review(i) for c in REGISTRY for i in found.get(c.name, [])]


def _second_pass(ctx: HealthContext, issues: list[Issue]) -> None:
    """Re-embed the rows this run's repairs left without a vector (outside the lock)."""
    wanted: dict[str, list[int]] = {"memories": [], "episodes": []}
    for i in issues:
        if "_nulled" in i:
            table, ids = i["_nulled"]
            wanted[table] += ids
        for table, ids in i.get("_nulled_tables", {}).items():
            wanted[table] += ids
    done: dict[str, set[int]] = {"memories": set(), "episodes": set()}
    usable = ctx.embedder is not None and ctx.probe.error is None
    for table, ids in wanted.items():
        if not ids or not usable or (table == "memories" and not ctx.stores_blobs):
            continue
        if not ctx.takes_configured_vectors(table):
            continue
        ids = sorted(set(ids))[: max(0, ctx.reembed_budget)]
        texts = sql.texts_by_id(sql.reading(ctx.db), table, ids)
        order = [i for i in ids if i in texts]
        blobs, error = ctx.try_embed([texts[i] for i in order])
        rows = [(i, b) for i, b in zip(order, blobs, strict=False) if b is not None]
        if error is None and rows:
            with sql.writing(ctx.db) as handle:
                sql.set_embeddings(handle, table, rows)
            done[table] = {i for i, _ in rows}
            ctx.reembed_budget -= len(rows)
    for i in issues:
        nulled = dict(i.pop("_nulled_tables", {}))
        if "_nulled" in i:
            table, ids = i.pop("_nulled")
            nulled[table] = list(nulled.get(table, [])) + list(ids)
        if any(nulled.values()):
            i["re_embedded"] = sum(len(done[t] & set(ids)) for t, ids in nulled.items())


# -- check_health --------------------------------------------------------------------------------


def stats(ctx: HealthContext) -> dict[str, Any]:
    c, agent = sql.reading(ctx.db), ctx.agent_id
    out: dict[str, Any] = {
        "db_size_bytes": sql.db_size(c),
        "memories": sql.count(c, "memories", agent),
        "episodes": sql.count(c, "episodes", agent),
        "profiles": sql.count(c, "profiles", agent),
        "pending_tasks": sql.count(c, "pending_memory_tasks", agent),
        "axes": {
            axis: {v or "(global)": n for v, n in sql.axis_counts(c, axis, agent)}
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
    extra_issues: Sequence[Issue] = (),
) -> dict[str, Any]:
    """The `check_health` answer (no `ok` key on success)."""
    refusal = unknown_names(requested)
    if refusal is not None:
        return refusal
    names = selected([str(n) for n in requested])
    effective = fix and not paused
    if ctx.embedder is not None and ctx.dim is None:
        ctx.dim = ctx.embedder.dim()
    if effective:
        issues = _fix_run(ctx, names)
        residual = run_checks(ctx, names)
    else:
        issues = residual = run_checks(ctx, names)
    issues = issues + list(extra_issues)
    summary = summarise(list(residual) + list(extra_issues))
    out: dict[str, Any] = {
        "total_memories": sql.count(sql.reading(ctx.db), "memories", ctx.agent_id),
        "issues": issues,
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
