"""`deep_check`: eight per-agent data-quality heuristics (surface.md §9.3), and
`get_session_findings`: the registry, read-only, repackaged as findings (§9.4).

Only `anonymous_source` and `short_content` act on `fix=true`; the others only report.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from cpersona import __version__
from cpersona.health.context import HealthContext
from cpersona.health.registry import (
    SKIP_REASON,
    report_findings,
    selected,
    summarise,
    unknown_names,
    verdict,
)
from cpersona.memory.text import py_json
from cpersona.retrieval.sidecar import SCORING_VERSION
from cpersona.storage.upkeep.embedding_rows import iter_embeddings, width_counts
from cpersona.storage.upkeep.handle import count, writing
from cpersona.storage.upkeep.sources import sentinel_rows, set_source
from cpersona.storage.upkeep.stamps import orphaned_episodes as orphaned_episode_rows
from cpersona.storage.upkeep.stamps import profile_updated_at
from cpersona.storage.upkeep.texts import delete_unlocked_memories, newest_texts
from cpersona.storage.upkeep.texts import short_content as short_content_rows

if TYPE_CHECKING:
    import numpy as np

Result = dict[str, Any]

SHORT_CONTENT_MAX = 5
STALE_PROFILE_DAYS = 30
STALE_CALIBRATION_DAYS = 90
NEAR_DUPLICATE_THRESHOLD = 0.97
NORM_TOLERANCE = 0.001
#: Wrong rows an answer lists by id.
SAMPLES = 10
_NAMED = re.compile(r"^\[([^\]\n]+)\] ")


def anonymous_source(ctx: HealthContext, fix: bool) -> Result:
    rows = sentinel_rows(ctx.c, ctx.agent_id)
    found = [(r, _NAMED.match(r.content)) for r in rows]
    recoverable = [(r, m.group(1)) for r, m in found if m]
    lost = [r for r, m in found if not m]
    out: Result = {"recoverable": len(recoverable), "unrecoverable": len(lost)}
    if recoverable:
        out["samples"] = [{"id": int(r.id), "recovered_name": name} for r, name in recoverable[:5]]
    if lost:
        out["unrecoverable_samples"] = [int(r.id) for r in lost[:5]]
    if fix and recoverable:
        fixed = 0
        with writing(ctx.db) as handle:
            for r, name in recoverable:
                source = py_json({"type": "User", "id": "", "name": name})
                fixed += set_source(handle, int(r.id), source)
        out["fixed"] = fixed
        out["unfixable_locked"] = sum(1 for r, _ in recoverable if r.locked)
    return out


def short_content(ctx: HealthContext, fix: bool) -> Result:
    rows = short_content_rows(ctx.c, ctx.agent_id, SHORT_CONTENT_MAX)
    out: Result = {"count": len(rows)}
    if rows:
        out["samples"] = [{"id": int(r.id), "content": r.content} for r in rows[:10]]
    if fix and rows:
        with writing(ctx.db) as handle:
            out["fixed"] = delete_unlocked_memories(handle, [int(r.id) for r in rows])
    return out


def stale_profile(ctx: HealthContext, fix: bool) -> Result:
    found = profile_updated_at(ctx.c, ctx.agent_id)
    out: Result = {"count": 0, "threshold_days": STALE_PROFILE_DAYS}
    if found is not None:
        out["last_updated"] = found[0]
        out["count"] = int(found[1] > STALE_PROFILE_DAYS)
    return out


def orphaned_episodes(ctx: HealthContext, fix: bool) -> Result:
    rows = orphaned_episode_rows(ctx.c, ctx.agent_id)
    out: Result = {"count": len(rows)}
    if rows:
        out["samples"] = [
            {"id": int(r.id), "start_time": r.start_time, "end_time": r.end_time} for r in rows[:5]
        ]
    return out


def calibration_staleness(ctx: HealthContext, fix: bool) -> Result:
    out: Result = {"threshold_days": STALE_CALIBRATION_DAYS}
    if ctx.embedder is None or ctx.sidecar is None:
        return {**out, "status": "not_applicable"}
    loaded = ctx.sidecar.load()
    stored = loaded.payload
    if loaded.state == "unreadable":
        return {**out, "status": "unknown", "hint": "the calibration sidecar is unreadable"}
    if stored is None or (
        stored.global_threshold is None and ctx.agent_id not in stored.agent_thresholds
    ):
        return {
            **out,
            "status": "never_calibrated",
            "hint": "calibrate_threshold derives this agent's threshold from its corpus",
        }
    if stored.scoring_version != SCORING_VERSION:
        return {
            **out,
            "status": "stale_scoring_version",
            "stored": stored.scoring_version,
            "current": SCORING_VERSION,
        }
    try:
        at = datetime.fromisoformat(str(stored.calibrated_at))
    except ValueError:
        return {**out, "status": "unknown", "hint": "calibrated_at does not parse"}
    if at.tzinfo is None:
        at = at.replace(tzinfo=UTC)
    age = (datetime.now(UTC) - at).total_seconds() / 86400
    status = "stale" if age > STALE_CALIBRATION_DAYS else "ok"
    return {**out, "status": status, "age_days": round(age, 1)}


def _vectors(ctx: HealthContext, table: str, limit: int) -> tuple[list[int], np.ndarray]:
    import numpy as np  # on first use: see docs/notes/performance-notes.md, "Start-up"

    rows = [
        r
        for batch in iter_embeddings(ctx.c, table, ctx.agent_id, newest_first=True, limit=limit)
        for r in batch
        if len(r[1]) % 4 == 0
    ]
    if not rows:
        return [], np.empty((0, 0), np.float32)
    widths: dict[int, int] = {}
    for _, blob in rows:
        widths[len(blob)] = widths.get(len(blob), 0) + 1
    modal = max(widths, key=lambda w: widths[w])
    rows = [r for r in rows if len(r[1]) == modal]
    return [i for i, _ in rows], np.stack([np.frombuffer(b, "<f4") for _, b in rows])


def near_duplicate(ctx: HealthContext, fix: bool) -> Result:
    import numpy as np  # on first use: see docs/notes/performance-notes.md, "Start-up"

    ids, vectors = _vectors(ctx, "memories", ctx.settings.near_duplicate_row_cap)
    out: Result = {"pairs": 0, "rows_scanned": len(ids), "threshold": NEAR_DUPLICATE_THRESHOLD}
    if len(ids) < 2:
        return {**out, "skipped": "fewer than two embedded memories"}
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    unit = (vectors / np.where(norms == 0, 1, norms)).astype(np.float32)
    samples: list[dict[str, Any]] = []
    pairs = 0
    for start in range(0, len(ids), 1024):
        block = unit[start : start + 1024] @ unit.T
        for r, c in zip(*np.nonzero(block >= NEAR_DUPLICATE_THRESHOLD), strict=True):
            a, b = start + int(r), int(c)
            if a < b:
                pairs += 1
                if len(samples) < 20:
                    samples.append(
                        {"a": ids[a], "b": ids[b], "similarity": round(float(block[r, c]), 4)}
                    )
    out["pairs"] = pairs
    if samples:
        out["samples"] = samples
        out["hint"] = "near-identical memories: merge them with update_memory + delete_memory"
    return out


@dataclass
class _Scan:
    """A capped scan of each table's newest rows: the rows found wrong per table, how many
    were read, whether that was every row, and the first few wrong ones."""

    by_table: dict[str, int] = field(default_factory=dict)
    samples: list[Result] = field(default_factory=list)
    scanned: int = 0
    complete: bool = True

    @property
    def room(self) -> int:
        """How many more samples the answer lists."""
        return SAMPLES - len(self.samples)

    def add(self, table: str, read: int, rows: int, wrong: int, samples: list[Result]) -> None:
        """`read` of the table's `rows` scanned, `wrong` of them found wrong."""
        self.scanned += read
        self.complete = self.complete and read >= rows
        self.by_table[table] = wrong
        self.samples += samples[: self.room]

    def result(self, **fields: Any) -> Result:
        """The answer, with the check's own `fields` before `complete`."""
        out: Result = {
            "count": sum(self.by_table.values()),
            "by_table": self.by_table,
            "rows_scanned": self.scanned,
            **fields,
            "complete": self.complete,
        }
        if self.samples:
            out["samples"] = self.samples
        return out


def unnormalized_content(ctx: HealthContext, fix: bool) -> Result:
    cap = ctx.settings.normalization_scan_cap
    scan = _Scan()
    for table, column in (
        ("memories", "content"),
        ("episodes", "summary"),
        ("profiles", "content"),
    ):
        rows = newest_texts(ctx.c, table, column, ctx.agent_id, cap)
        bad = [i for i, text in rows if not unicodedata.is_normalized("NFC", text)]
        samples = [{"table": table, "id": i} for i in bad[: scan.room]]
        scan.add(table, len(rows), count(ctx.c, table, ctx.agent_id), len(bad), samples)
    return scan.result()


def embedding_norm(ctx: HealthContext, fix: bool) -> Result:
    import numpy as np  # on first use: see docs/notes/performance-notes.md, "Start-up"

    cap = ctx.settings.normalization_scan_cap
    scan = _Scan()
    for table in ("memories", "episodes"):
        ids, vectors = _vectors(ctx, table, cap)
        embedded = sum(width_counts(ctx.c, table, ctx.agent_id).values())
        if not ids:
            scan.add(table, 0, embedded, 0, [])
            continue
        norms = np.linalg.norm(vectors.astype(np.float64), axis=1)
        bad = np.flatnonzero(np.abs(norms - 1.0) > NORM_TOLERANCE)
        samples = [
            {"table": table, "id": ids[k], "norm": round(float(norms[k]), 6)}
            for k in bad[: scan.room]
        ]
        scan.add(table, len(ids), embedded, int(bad.size), samples)
    return scan.result(tolerance=NORM_TOLERANCE)


DEEP_CHECKS: dict[str, Callable[[HealthContext, bool], Result]] = {
    "anonymous_source": anonymous_source,
    "short_content": short_content,
    "stale_profile": stale_profile,
    "orphaned_episodes": orphaned_episodes,
    "calibration_staleness": calibration_staleness,
    "near_duplicate": near_duplicate,
    "unnormalized_content": unnormalized_content,
    "embedding_norm": embedding_norm,
}
DEEP_NAMES = tuple(DEEP_CHECKS)


def deep_check(
    ctx: HealthContext, *, requested: Sequence[Any] = (), fix: bool = False, paused: bool = False
) -> dict[str, Any]:
    """The `deep_check` answer for the exact agent `ctx.agent_id` ("" is the empty bucket)."""
    refusal = unknown_names(requested, DEEP_NAMES)
    if refusal is not None:
        return refusal
    names = list(dict.fromkeys(str(n) for n in requested)) if requested else list(DEEP_NAMES)
    effective = fix and not paused
    results: dict[str, Any] = {}
    for name in names:
        try:
            results[name] = DEEP_CHECKS[name](ctx, effective)
        except Exception as exc:
            results[name] = {"error": f"{type(exc).__name__}: {exc}"}
    out: dict[str, Any] = {
        "agent_id": ctx.agent_id,
        "checks_run": names,
        "results": results,
        "fixed": effective,
    }
    if fix and paused:
        out["repairs_skipped"] = True
        out["repairs_skip_reason"] = SKIP_REASON
    return out


def session_findings(
    ctx: HealthContext,
    *,
    per_kind_limit: int,
    include_summary: bool,
    identity_shared: bool,
    extra_issues: Sequence[dict[str, Any]] = (),
) -> dict[str, Any]:
    """`get_session_findings`: every check, read-only, over the whole database."""
    if per_kind_limit < 1:
        return {
            "ok": False,
            "error": "per_kind_limit must be >= 1",
            "per_kind_limit": per_kind_limit,
        }
    ctx.agent_id = ""
    if ctx.embedder is not None and ctx.dim is None:
        ctx.dim = ctx.embedder.dim()
    issues = report_findings(ctx, selected([])) + list(extra_issues)
    findings: list[dict[str, Any]] = []
    counts: dict[str, int] = {}
    for i in issues:
        kind = str(i.get("check", i["type"]))
        if kind == "null_embedding" and i["severity"] == "critical":
            kind = "null_embedding_pipeline_down"
        counts[kind] = counts.get(kind, 0) + 1
        if counts[kind] <= per_kind_limit:
            findings.append(
                {**i, "kind": kind, "severity": i["severity"], "health_severity": i["severity"]}
            )
    severities = summarise(issues)
    out: dict[str, Any] = {
        "findings": findings,
        "total": len(issues),
        "counts_by_kind": counts,
        "counts_by_severity": severities,
        "capped_kinds": sorted(k for k, n in counts.items() if n > per_kind_limit),
        "per_kind_limit": per_kind_limit,
    }
    if include_summary:
        out["summary"] = {
            "status": verdict(severities),
            "severity_summary": severities,
            "total_memories": count(ctx.c, "memories"),
        }
    if identity_shared:
        out["identity_shared"] = True
    out["_meta"] = {"server_version": __version__}
    return out
