"""Detection of the `check_health` registry (surface.md §9.2): one function per check name.

A detector returns the check's issues (`type`, `severity`, `check`, its own fields, and
`repairable` for fix-capable checks: rows or objects this run's fix would write, None when
unknown). It only reads. What its repair needs (row ids, new values) goes to
`ctx.scratch[<check>]`; the repair (repairs.py) runs right after it in the same savepoint.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from datetime import UTC
from pathlib import Path
from typing import Any

from cpersona.health.context import HealthContext
from cpersona.memory.text import normalize_source, parse_utc, py_json
from cpersona.operating_context import SUMMARY_SOFT_LIMIT
from cpersona.storage import health as sql
from cpersona.storage.schema import SCHEMA_VERSION

Issue = dict[str, Any]
TABLES = ("memories", "episodes")


@dataclass(frozen=True, slots=True)
class ModelProbe:
    """What `probe_model` found: rows compared, and {table: ids} whose vectors differ."""

    sampled: int
    differing: dict[str, list[int]]

    @property
    def count(self) -> int:
        return sum(len(ids) for ids in self.differing.values())


ANNOTATION = re.compile(r"\[Memory from [^\]]+\]\s*")
MENTION = re.compile(r"\s*<@!?\d+>")
_OFFSET = re.compile(r"(Z|z|[+-]\d{2}:?\d{2})$")
_UTC_OFFSETS = ("Z", "z", "+00:00", "-00:00", "+0000", "-0000")
#: Stored vectors compared against a fresh embedding of the same text by `embedding_model`, per
#: table: the newest (where an import lands) and a few of the oldest. Bounded so that a
#: report-only run with a local model costs at most 2 x 32 embeddings (docs/reliability.md).
MODEL_PROBE_NEWEST = 24
MODEL_PROBE_OLDEST = 8
MODEL_PROBE_MIN_COSINE = 0.99


def issue(check: str, type_: str, severity: str, **fields: Any) -> Issue:
    return {"type": type_, "severity": severity, "check": check, **fields}


def skipped(check: str, reason: str) -> list[Issue]:
    """A check that cannot apply here says so (info never degrades the verdict)."""
    return [issue(check, f"{check}_skipped", "info", reason=reason)]


def not_applicable(check: str, reason: str) -> Issue:
    """A check whose subject does not exist on this storage backend (an SQLite file's
    integrity on PostgreSQL): said, never passed silently; info never degrades."""
    return issue(check, f"{check}_not_applicable", "info", status="not_applicable", reason=reason)


# -- 1-4: content ------------------------------------------------------------------------------


def _rewrite_check(
    ctx: HealthContext, check: str, needle: str, pattern: re.Pattern[str], severity: str
) -> list[Issue]:
    rows = sql.memories_containing(ctx.c, needle, ctx.agent_id)
    if not rows:
        return []
    plan = []
    for r in rows:
        new = pattern.sub("", r.content).strip()
        if not r.locked and new != r.content:
            plan.append((int(r.id), new))
    ctx.scratch[check] = plan
    locked = sum(1 for r in rows if r.locked)
    return [
        issue(
            check,
            check,
            severity,
            count=len(rows),
            locked=locked,
            repairable=len(plan),
            sample_ids=[int(r.id) for r in rows[:10]],
        )
    ]


def memory_annotation(ctx: HealthContext) -> list[Issue]:
    return _rewrite_check(ctx, "memory_annotation", "[Memory from", ANNOTATION, "info")


def discord_mention(ctx: HealthContext) -> list[Issue]:
    return _rewrite_check(ctx, "discord_mention", "<@", MENTION, "info")


def oversized_content(ctx: HealthContext) -> list[Issue]:
    cap = ctx.settings.max_content_length
    rows = sql.oversized_memories(ctx.c, cap, ctx.agent_id)
    if not rows:
        return []
    ids = [int(r.id) for r in rows if not r.locked]
    ctx.scratch["oversized_content"] = ids
    return [
        issue(
            "oversized_content",
            "oversized_content",
            "warn",
            count=len(rows),
            max_len=max(int(r.n) for r in rows),
            cap=cap,
            locked=len(rows) - len(ids),
            repairable=len(ids),
        )
    ]


def duplicate_content(ctx: HealthContext) -> list[Issue]:
    groups = sql.duplicate_groups(ctx.c, ctx.agent_id)
    if not groups:
        return []
    doomed: list[int] = []
    for group in groups:
        pool = [r for r in group if r.channel == ""] or group
        survivor = min(int(r.id) for r in pool)
        doomed += [int(r.id) for r in group if int(r.id) != survivor and not r.locked]
    ctx.scratch["duplicate_content"] = doomed
    extra = sum(len(g) - 1 for g in groups)
    return [
        issue(
            "duplicate_content",
            "duplicate_content",
            "warn",
            groups=len(groups),
            total_extra=extra,
            repairable=len(doomed),
        )
    ]


# -- 5-9: embeddings ---------------------------------------------------------------------------


def embedding_dimension(ctx: HealthContext) -> list[Issue]:
    if ctx.embedder is None:
        return skipped("embedding_dimension", "no embedding backend is configured")
    if ctx.dim is None:
        why = ctx.probe.error or (
            "the backend's width is not known until it answers (fix=true probes it)"
        )
        return skipped("embedding_dimension", why)
    by_table = {t: sql.wrong_width(ctx.c, t, ctx.dim * 4, ctx.agent_id) for t in TABLES}
    total = sum(len(ids) for ids in by_table.values())
    if not total:
        return []
    ctx.scratch["embedding_dimension"] = by_table
    return [
        issue(
            "embedding_dimension",
            "embedding_dimension",
            "critical",
            count=total,
            by_table={t: len(ids) for t, ids in by_table.items()},
            expected_dim=ctx.dim,
            repairable=total,
        )
    ]


def nonfinite_embedding(ctx: HealthContext) -> list[Issue]:
    import numpy as np  # on first use: see docs/performance.md, "Start-up"

    out = []
    for table in TABLES:
        bad: list[int] = []
        for batch in sql.iter_embeddings(ctx.c, table, ctx.agent_id):
            for row_id, blob in batch:
                if len(blob) % 4 == 0 and not np.all(np.isfinite(np.frombuffer(blob, "<f4"))):
                    bad.append(row_id)
        if bad:
            ctx.scratch[f"nonfinite_embedding:{table}"] = bad
            out.append(
                issue(
                    "nonfinite_embedding",
                    "nonfinite_embedding",
                    "warn",
                    table=table,
                    count=len(bad),
                    repairable=len(bad),
                )
            )
    return out


def embedding_backend(ctx: HealthContext) -> list[Issue]:
    if ctx.embedder is None:
        return skipped("embedding_backend", "no embedding backend is configured")
    health = ctx.embedding_health
    if health is not None and health.state == "fault":
        kind = health.kind or "unreachable"
        return [
            issue(
                "embedding_backend",
                f"embedding_backend_{kind}",
                "warn",
                evidence=health.evidence,
                source="recall",
            )
        ]
    if ctx.probe.ran:
        if ctx.probe.error is None:
            return []
        kind = "misconfigured" if ctx.probe.misconfigured else "unreachable"
        return [
            issue(
                "embedding_backend",
                f"embedding_backend_{kind}",
                "warn",
                evidence=ctx.probe.error,
                source="probe",
            )
        ]
    return [
        issue(
            "embedding_backend",
            "embedding_backend_not_probed",
            "info",
            hint="liveness is tested by check_health(fix=true)",
        )
    ]


def _null_check(ctx: HealthContext, check: str, table: str) -> list[Issue]:
    missing = sql.missing_embeddings(ctx.c, table, ctx.agent_id)
    if not missing:
        return []
    total = sql.count(ctx.c, table, ctx.agent_id)
    stored = ctx.stores_blobs or table == "episodes"
    fields: dict[str, Any] = {"count": missing, "total": total}
    if ctx.embedder is None or not stored:
        fields["hint"] = (
            "no embedding backend is configured: these rows are found by "
            "full-text and keyword search only"
            if ctx.embedder is None
            else "local vectors are not stored (remote vector mode without CPERSONA_STORE_BLOB)"
        )
        return [issue(check, check, "info", repairable=0, **fields)]
    severity = "critical" if missing * 2 > total else "warn"
    return [
        issue(
            check, check, severity, repairable=min(missing, ctx.settings.reembed_row_cap), **fields
        )
    ]


def null_embedding(ctx: HealthContext) -> list[Issue]:
    return _null_check(ctx, "null_embedding", "memories")


def null_episode_embedding(ctx: HealthContext) -> list[Issue]:
    return _null_check(ctx, "null_episode_embedding", "episodes")


# -- 10-14: structure --------------------------------------------------------------------------


def fts_integrity(ctx: HealthContext) -> list[Issue]:
    if not ctx.settings.fts_enabled:
        return skipped("fts_integrity", "full-text search is disabled (CPERSONA_FTS_ENABLED)")
    out = []
    for table in ("memories_fts", "episodes_fts"):
        if not sql.table_exists(ctx.c, table):
            out.append(
                issue(
                    "fts_integrity",
                    "fts_integrity",
                    "critical",
                    table=table,
                    missing=True,
                    repairable=1,
                )
            )
            continue
        problem = sql.fts_problem(ctx.c, table)
        if problem is not None and "readonly" in problem:
            problem = _fts_counts_problem(ctx, table)
        if problem is not None:
            out.append(
                issue(
                    "fts_integrity",
                    "fts_integrity",
                    "critical",
                    table=table,
                    detail=problem,
                    repairable=1,
                )
            )
    return out


def _fts_counts_problem(ctx: HealthContext, table: str) -> str | None:
    # A read-only connection cannot run FTS5's integrity-check (an INSERT command); compare
    # the index's document count with its content table instead.
    content = "memories" if table == "memories_fts" else "episodes"
    try:
        indexed = sql.count(ctx.c, f"{table}_docsize")
    except Exception as exc:
        return f"unreadable: {exc}"
    rows = sql.count(ctx.c, content)
    return None if indexed == rows else f"{indexed} rows indexed, {rows} in {content}"


#: The newest upstream schema cpersona has been shown to serve (CPersona 2.6.14's file in the
#: test fixtures: tests/admin/test_health_history.py).
TESTED_UPSTREAM_SCHEMA = 21


def schema_version(ctx: HealthContext) -> list[Issue]:
    found = sql.schema_version(ctx.c)
    if found == SCHEMA_VERSION:
        return []
    if found > SCHEMA_VERSION:
        # A store a newer upstream CPersona (2.6.x) has upgraded: cpersona serves the tables it
        # knows and leaves the newer ones alone, and what it needs is checked by
        # schema_objects; the version itself is history, not damage (issue 21).
        note = (
            "tested with this version"
            if found <= TESTED_UPSTREAM_SCHEMA
            else f"newer than the newest tested ({TESTED_UPSTREAM_SCHEMA})"
        )
        return [
            issue(
                "schema_version",
                "schema_version_newer",
                "info",
                found=found,
                expected=SCHEMA_VERSION,
                hint=f"written by a newer upstream CPersona; cpersona serves it ({note}) and "
                "leaves its newer tables as they are",
            )
        ]
    return [
        issue("schema_version", "schema_version", "critical", found=found, expected=SCHEMA_VERSION)
    ]


def dedup_msg_id_index(ctx: HealthContext) -> list[Issue]:
    if sql.object_sql(ctx.c, "idx_memories_dedup_msg_id") is not None:
        return []
    rows = sql.msg_id_colliders(ctx.c)
    unlocked = sum(1 for locked in rows if not locked)
    blocked = len(rows) - unlocked
    return [
        issue(
            "dedup_msg_id_index",
            "dedup_msg_id_index_missing",
            "critical",
            colliding_rows=len(rows),
            locked_colliding_rows=blocked,
            cross_agent=True,
            repairable=unlocked + (0 if blocked else 1),
        )
    ]


def _normalise_ddl(text: str) -> str:
    text = re.sub(r"(?i)\bif\s+not\s+exists\b", " ", text)
    text = re.sub(r"[\"'`\[\]]", "", text.lower())
    text = re.sub(r"\s+", " ", text)
    return re.sub(r"\s*([(),;=<>])\s*", r"\1", text).strip()


def schema_objects(ctx: HealthContext) -> list[Issue]:
    out = []
    plan = []
    for name, (kind, ddl, critical) in sql.SCHEMA_OBJECTS.items():
        if kind == "trigger" and not ctx.settings.fts_enabled:
            continue
        found = sql.object_sql(ctx.c, name)
        severity = "critical" if critical else "warn"
        if found is None:
            state = "missing"
        elif _normalise_ddl(found) != _normalise_ddl(ddl):
            state = "drifted"
        else:
            continue
        plan.append((name, kind, ddl, state))
        out.append(
            issue(
                "schema_objects",
                f"schema_object_{state}",
                severity,
                object=name,
                kind=kind,
                repairable=1,
            )
        )
    ctx.scratch["schema_objects"] = plan
    return out


def sqlite_integrity(ctx: HealthContext) -> list[Issue]:
    messages = sql.quick_check(ctx.c)
    if messages == ["ok"]:
        return []
    return [
        issue(
            "sqlite_integrity",
            "sqlite_integrity",
            "critical",
            messages=messages[:10],
            hint="restore the database from a backup",
        )
    ]


# -- 15-28: data hygiene -----------------------------------------------------------------------


def axis_hygiene(ctx: HealthContext) -> list[Issue]:
    clusters: dict[str, set[str]] = {}
    for value in sql.project_ids(ctx.c, ctx.agent_id):
        if value:
            clusters.setdefault(re.sub(r"[^a-z0-9]", "", value.lower()), set()).add(value)
    drift = sorted(sorted(v) for v in clusters.values() if len(v) > 1)
    if not drift:
        return []
    return [issue("axis_hygiene", "project_id_naming_drift", "warn", clusters=drift)]


def invalid_json(ctx: HealthContext) -> list[Issue]:
    rows = sql.invalid_json(ctx.c, ctx.agent_id)
    if not rows:
        return []
    ids = [int(r.id) for r in rows if not r.locked]
    ctx.scratch["invalid_json"] = ids
    return [
        issue(
            "invalid_json",
            "invalid_json",
            "warn",
            count=len(rows),
            source=sum(1 for r in rows if not r.source_ok),
            metadata=sum(1 for r in rows if not r.meta_ok),
            locked=len(rows) - len(ids),
            repairable=len(ids),
        )
    ]


def _timestamp_rows(ctx: HealthContext, check: str, rows: list[Any]) -> list[Issue]:
    if not rows:
        return []
    ids = [int(r.id) for r in rows if not r.locked and r.fixable]
    ctx.scratch[check] = ids
    return [
        issue(
            check,
            check,
            "warn",
            count=len(rows),
            repairable=len(ids),
            sample_ids=[int(r.id) for r in rows[:10]],
        )
    ]


def invalid_timestamp(ctx: HealthContext) -> list[Issue]:
    return _timestamp_rows(
        ctx, "invalid_timestamp", sql.unparseable_timestamps(ctx.c, ctx.agent_id)
    )


def future_timestamp(ctx: HealthContext) -> list[Issue]:
    skew = ctx.settings.future_timestamp_skew_seconds
    return _timestamp_rows(
        ctx, "future_timestamp", sql.future_timestamps(ctx.c, skew, ctx.agent_id)
    )


def missing_episode_start_time(ctx: HealthContext) -> list[Issue]:
    ids = sql.episodes_without_start(ctx.c, ctx.agent_id)
    if not ids:
        return []
    ctx.scratch["missing_episode_start_time"] = ids
    return [
        issue(
            "missing_episode_start_time",
            "missing_episode_start_time",
            "info",
            count=len(ids),
            repairable=len(ids),
        )
    ]


def stamp_class(stamp: str) -> str | None:
    """`utc`, `aware` (another offset) or `naive`; None when it does not parse."""
    if parse_utc(stamp) is None:
        return None
    match = _OFFSET.search(stamp.strip())
    if match is None:
        return "naive"
    return "utc" if match.group(1) in _UTC_OFFSETS else "aware"


def to_utc(stamp: str) -> str:
    instant = parse_utc(stamp)
    assert instant is not None
    return instant.astimezone(UTC).isoformat()


def timestamp_format_drift(ctx: HealthContext) -> list[Issue]:
    counts = {"utc": 0, "aware": 0, "naive": 0}
    plan: list[tuple[int, str]] = []
    locked = 0
    for r in sql.memory_timestamps(ctx.c, ctx.agent_id):
        kind = stamp_class(r.timestamp)
        if kind is None:
            continue
        counts[kind] += 1
        if kind == "aware":
            if r.locked:
                locked += 1
            else:
                plan.append((int(r.id), to_utc(r.timestamp)))
    forms = sum(1 for n in counts.values() if n)
    if not counts["aware"] and forms <= 1:
        return []
    ctx.scratch["timestamp_format_drift"] = plan
    return [
        issue(
            "timestamp_format_drift",
            "timestamp_format_drift",
            "warn",
            **counts,
            unfixable_naive=counts["naive"] if forms > 1 else 0,
            unfixable_locked=locked,
            repairable=len(plan),
        )
    ]


def episode_timestamp_format_drift(ctx: HealthContext) -> list[Issue]:
    counts = {"utc": 0, "aware": 0, "naive": 0}
    plan: list[tuple[int, str | None, str | None]] = []
    unfixable = 0
    for r in sql.episode_times(ctx.c, ctx.agent_id):
        new = []
        changed = False
        for stamp in (r.start_time, r.end_time):
            kind = stamp_class(stamp) if stamp else None
            if kind is not None:
                counts[kind] += 1
            if kind == "aware":
                new.append(to_utc(stamp))
                changed = True
            elif kind == "naive" and stamp == r.created_at and r.canon:
                new.append(r.canon)
                changed = True
            else:
                unfixable += kind == "naive"
                new.append(stamp)
        if changed:
            plan.append((int(r.id), new[0], new[1]))
    forms = sum(1 for n in counts.values() if n)
    if not counts["aware"] and forms <= 1:
        return []
    ctx.scratch["episode_timestamp_format_drift"] = plan
    return [
        issue(
            "episode_timestamp_format_drift",
            "episode_timestamp_format_drift",
            "warn",
            **counts,
            unfixable_naive=unfixable,
            repairable=len(plan),
        )
    ]


def stale_pending_tasks(ctx: HealthContext) -> list[Issue]:
    ids = sql.stale_tasks(ctx.c, ctx.agent_id)
    if not ids:
        return []
    ctx.scratch["stale_pending_tasks"] = ids
    return [
        issue(
            "stale_pending_tasks",
            "stale_pending_tasks",
            "warn",
            count=len(ids),
            older_than_hours=1,
            repairable=len(ids),
        )
    ]


def missing_profile(ctx: HealthContext) -> list[Issue]:
    agents = sql.agents_without_profile(ctx.c, ctx.agent_id)
    if not agents:
        return []
    return [
        issue("missing_profile", "missing_profile", "info", count=len(agents), agents=agents[:50])
    ]


def empty_content(ctx: HealthContext) -> list[Issue]:
    rows = sql.empty_content(ctx.c, ctx.agent_id)
    if not rows:
        return []
    ids = [int(r.id) for r in rows if not r.locked]
    ctx.scratch["empty_content"] = ids
    return [
        issue(
            "empty_content",
            "empty_content",
            "warn",
            count=len(rows),
            locked=len(rows) - len(ids),
            repairable=len(ids),
        )
    ]


def invalid_source_type(ctx: HealthContext) -> list[Issue]:
    rows = sql.untyped_sources(ctx.c, ctx.agent_id)
    if not rows:
        return []
    cap = ctx.settings.invalid_source_classify_cap
    plan: list[tuple[int, str]] = []
    unmapped = locked = 0
    for r in rows[:cap]:
        folded = normalize_source(json.loads(r.source))
        if isinstance(folded, dict) and folded.get("type") in ("User", "Agent", "System"):
            if r.locked:
                locked += 1
            else:
                plan.append((int(r.id), py_json(folded)))
        else:
            unmapped += 1
    ctx.scratch["invalid_source_type"] = plan
    severity = "warn" if plan else "info"
    return [
        issue(
            "invalid_source_type",
            "invalid_source_type",
            severity,
            count=len(rows),
            mappable=len(plan),
            unmapped=unmapped,
            locked=locked,
            remaining=max(0, len(rows) - cap),
            repairable=len(plan),
        )
    ]


def oversized_profile(ctx: HealthContext) -> list[Issue]:
    cap = ctx.settings.max_profile_length
    rows = sql.oversized_profiles(ctx.c, cap, ctx.agent_id)
    if not rows:
        return []
    ctx.scratch["oversized_profile"] = [int(r.id) for r in rows]
    return [
        issue(
            "oversized_profile",
            "oversized_profile",
            "warn",
            count=len(rows),
            max_len=max(int(r.n) for r in rows),
            cap=cap,
            repairable=len(rows),
        )
    ]


def anonymous_source(ctx: HealthContext) -> list[Issue]:
    sentinel, unattributed = sql.anonymous_sources(ctx.c, ctx.agent_id)
    if not sentinel and not unattributed:
        return []
    return [
        issue(
            "anonymous_source",
            "anonymous_source",
            "info",
            count=sentinel,
            unattributed=unattributed,
            hint="deep_check anonymous_source recovers names written as '[name] ...'",
        )
    ]


def vector_fallback_config(ctx: HealthContext) -> list[Issue]:
    s = ctx.settings
    if s.vector_search_mode == "remote" and not s.store_blob:
        return [
            issue(
                "vector_fallback_config",
                "no_local_vector_fallback",
                "info",
                hint="with the remote vector service down, recall has no local vectors",
            )
        ]
    return []


# -- 29, 33: cpersona's derived files and model ----------------------------------------------


def vector_index(ctx: HealthContext) -> list[Issue]:
    if ctx.indexes is None:
        return skipped(
            "vector_index",
            "the index files are not open (never indexed by "
            "cpersona; the server builds them at its first start)",
        )
    out = []
    plan = []
    for table, index in ctx.indexes.items():
        embedded = sum(sql.width_counts(ctx.c, table, "").values())
        if ctx.read_only and not index.path.exists():
            if embedded:
                out.append(
                    issue(
                        "vector_index",
                        "vector_index_absent",
                        "info",
                        table=table,
                        rows=embedded,
                        hint="the server builds it when it starts",
                    )
                )
            continue
        status = index.status()
        if status.rebuild is not None:  # being rebuilt on this host: say how far, do not verify
            progress = status.rebuild
            out.append(
                issue(
                    "vector_index",
                    "vector_index_rebuilding",
                    "info",
                    table=table,
                    reason=progress.reason,
                    done=progress.done,
                    total=progress.total,
                    pid=progress.pid,
                )
            )
            continue
        if not status.usable:
            if status.reason == "missing" and not embedded:
                continue
            severity = "info" if status.reason == "missing" else "warn"
            plan.append(table)
            kind = "absent" if severity == "info" else "unusable"
            out.append(
                issue(
                    "vector_index",
                    f"vector_index_{kind}",
                    severity,
                    table=table,
                    reason=status.reason,
                    repairable=1,
                )
            )
            continue
        if status.applied_seq < status.log_seq and ctx.read_only:
            out.append(
                issue(
                    "vector_index",
                    "vector_index_behind",
                    "info",
                    table=table,
                    applied_seq=status.applied_seq,
                    log_seq=status.log_seq,
                )
            )
            continue
        problems = index.verify()
        if problems:
            plan.append(table)
            out.append(
                issue(
                    "vector_index",
                    "vector_index_mismatch",
                    "warn",
                    table=table,
                    count=len(problems),
                    samples=problems[:5],
                    repairable=1,
                )
            )
    ctx.scratch["vector_index"] = plan
    return out


def operating_context_parse(ctx: HealthContext) -> list[Issue]:
    problem = ctx.oc.present_but_unusable()
    if problem is None:
        return []
    return [
        issue(
            "operating_context_parse",
            "operating_context_parse",
            "warn",
            path=ctx.oc.path,
            detail=problem,
            hint="the operating context is dormant until the file is fixed",
        )
    ]


def operating_context_size(ctx: HealthContext) -> list[Issue]:
    context, _ = ctx.oc.load()
    if context is None or len(context.summary) <= SUMMARY_SOFT_LIMIT:
        return []
    return [
        issue(
            "operating_context_size",
            "operating_context_size",
            "info",
            chars=len(context.summary),
            limit=SUMMARY_SOFT_LIMIT,
        )
    ]


def _guarded_paths(ctx: HealthContext) -> tuple[list[Path], list[Path]]:
    """The files and directories of cpersona's that exist (a path that is not there is not
    loose: it was never a reason to fail the check, issue 21)."""
    files, dirs = _postgresql_paths(ctx) if ctx.db.dialect == "postgresql" else _sqlite_paths(ctx)
    return [f for f in files if f.is_file()], [d for d in dirs if d.is_dir()]


def _postgresql_paths(ctx: HealthContext) -> tuple[list[Path], list[Path]]:
    """On PostgreSQL the database's files are the server's; this host keeps the full-text
    index files (their text is the memories') in its cache directory, and the alias ledger."""
    from cpersona.fts.cache import cache_directory

    cache = cache_directory(ctx.settings.cache_dir, ctx.db.path)
    files = [*sorted(cache.glob("index.*")), cache / "database.txt"]
    if ctx.settings.alias_ledger_file:
        files.append(Path(ctx.settings.alias_ledger_file))
    return files, [cache]


def _sqlite_paths(ctx: HealthContext) -> tuple[list[Path], list[Path]]:
    db = Path(ctx.settings.db_path).resolve()
    files = [db, Path(f"{db}-wal"), Path(f"{db}-shm")]
    files += sorted(db.parent.glob(db.name.replace("[", "[[]") + ".calibration.json*"))
    files += [
        db.parent / "update-check.json",
        Path(ctx.settings.alias_ledger_file or db.parent / "alias_ledger.json"),
    ]
    for table in TABLES:
        files += [
            Path(f"{db}.{table}.vec"),
            Path(f"{db}.{table}.vec.sum"),
            Path(f"{db}.{table}.vec.lock"),
            Path(f"{db}.{table}.vecindex"),
        ]
    return files, [db.parent]


def file_permissions(ctx: HealthContext) -> list[Issue]:
    if ctx.db.is_memory:
        return skipped("file_permissions", "in-memory database: no files")
    if os.name != "posix":
        return skipped("file_permissions", "mode bits are not enforced on this platform")
    files, dirs = _guarded_paths(ctx)
    loose = [f for f in files if f.stat().st_mode & 0o077]
    loose_dirs = [d for d in dirs if d.stat().st_mode & 0o077]
    if not loose and not loose_dirs:
        return []
    ctx.scratch["file_permissions"] = loose
    return [
        issue(
            "file_permissions",
            "file_permissions",
            "warn",
            files=[str(f) for f in loose],
            directories=[str(d) for d in loose_dirs],
            repairable=len(loose),
        )
    ]


def embedding_model(ctx: HealthContext) -> list[Issue]:
    if ctx.embedder is None:
        return skipped("embedding_model", "no embedding backend is configured")
    configured = ctx.embedder.name
    conversion = _conversion(ctx, configured)
    if conversion:
        # The stored vectors are recorded as another model's: recall serves them with that
        # model (or without vectors) and `cpersona reembed` converts them; no probe or fix
        # here may write vectors of the configured model among them.
        return conversion
    widths: dict[int, int] = {}
    for table in TABLES:
        for width, n in sql.width_counts(ctx.c, table, ctx.agent_id).items():
            widths[width] = widths.get(width, 0) + n
    embedded = sum(widths.values())
    if not embedded:
        return []
    modal = max(widths, key=lambda w: (widths[w], w))
    out: list[Issue] = []
    if ctx.dim is not None and modal != ctx.dim:
        out.append(
            issue(
                "embedding_model",
                "embedding_model_width_mismatch",
                "warn",
                stored_width=modal,
                configured_width=ctx.dim,
                configured_model=configured,
                rows=embedded - widths.get(ctx.dim, 0),
                repairable=embedded - widths.get(ctx.dim, 0),
            )
        )
        ctx.scratch["embedding_model"] = "width"
        return out
    stored = ctx.sidecar.load().payload if ctx.sidecar is not None else None
    label = stored.embedding_model if stored is not None else ""
    # A fix run probes before taking the write lock; that answer is used once.
    probe, ctx.model_probe = ctx.model_probe, None
    if probe is None and ctx.handle is None:  # never embed under the fix run's write lock
        # Report-only too (issue 21): with a local model the probe costs no request; the
        # stored vectors' width stands in for a provider that has not loaded yet.
        probe = probe_model(ctx, modal)
    # A model change moves every vector; a row or two whose text was edited behind the
    # server's back must not read as one, so the evidence is a majority of the sample.
    if probe is not None and probe.count * 2 > probe.sampled:
        ctx.scratch["embedding_model"] = "all"
        out.append(
            issue(
                "embedding_model",
                "embedding_model_mismatch",
                "warn",
                configured_model=configured,
                stored_model=label or None,
                sampled=probe.sampled,
                differing=probe.count,
                repairable=embedded,
                hint="vectors from another model make similarity meaningless; "
                "fix=true re-embeds them with the configured model",
            )
        )
    elif probe is not None and probe.count:
        # Fewer than half: rows whose vectors came from elsewhere (an import of another
        # model's export, a 2.5.x server writing with another model), not a model change.
        ctx.scratch["embedding_model"] = ("rows", probe.differing)
        out.append(
            issue(
                "embedding_model",
                "embedding_model_foreign_rows",
                "warn",
                configured_model=configured,
                sampled=probe.sampled,
                differing=probe.count,
                rows=probe.differing,
                repairable=probe.count,
                hint="these rows' vectors are not the configured model's embedding of their "
                "text (imported from another model?), so recall compares them with nothing "
                "they mean; fix=true re-embeds them. The probe samples the newest and oldest "
                "rows: run the check again after the fix",
            )
        )
    elif label and label != configured:
        if probe is not None:
            out.append(
                issue(
                    "embedding_model",
                    "embedding_model_label_stale",
                    "info",
                    configured_model=configured,
                    stored_model=label,
                    hint="stored vectors match the configured model; "
                    "calibrate_threshold records its name",
                )
            )
        else:
            out.append(
                issue(
                    "embedding_model",
                    "embedding_model_changed",
                    "warn",
                    configured_model=configured,
                    stored_model=label,
                    repairable=None,
                    hint="the calibration was measured on another model; "
                    "check_health(fix=true) compares stored vectors with fresh ones "
                    "and re-embeds them if they differ",
                )
            )
    return out


def _conversion(ctx: HealthContext, configured: str) -> list[Issue]:
    # Both come with numpy: imported on first use (docs/performance.md, "Start-up").
    from cpersona import reembed
    from cpersona.embedding.routing import REEMBED_COMMAND

    """Findings about model conversions: one begun and not finished, or one that is due."""
    out = []
    record = sql.recorded_models(ctx.c)
    for table, conv in sorted(sql.open_conversions(ctx.c).items()):
        done, total = sql.conversion_progress(ctx.c, table)
        live = not ctx.db.is_memory and reembed.running(ctx.db.path)
        out.append(
            issue(
                "embedding_model",
                "reembed_running" if live else "reembed_interrupted",
                "info" if live else "warn",
                table=table,
                stored_model=record[table].model if table in record else None,
                target_model=conv.model,
                phase=conv.phase,
                started_at=conv.started_at,
                rows_converted=done,
                rows=total,
                repairable=None,
                hint=(
                    "a conversion is running; the old vectors serve until it switches over"
                    if live
                    else f"a conversion stopped before it finished; run `{REEMBED_COMMAND}` "
                    "again: it continues where it stopped (the old vectors serve meanwhile)"
                ),
            )
        )
    pending = {
        t: r.model
        for t, r in sorted(record.items())
        if r.model != configured and sql.has_vectors(ctx.c, t)
    }
    if pending and not out:  # an open conversion is the finding that says what to do
        out.append(
            issue(
                "embedding_model",
                "embedding_model_conversion_pending",
                "warn",
                configured_model=configured,
                stored_model=dict(pending),
                repairable=None,
                hint=f"the stored vectors are another model's; recall queries with that model "
                f"where it runs here, else uses full-text and keyword search only. "
                f"`{REEMBED_COMMAND}` converts them in place",
            )
        )
    return out


def probe_model(ctx: HealthContext, dim: int | None = None) -> ModelProbe | None:
    """Re-embed a bounded sample of stored memories and episodes of width `dim` (default: the
    provider's) and name the rows whose stored vector is not the configured model's
    embedding of their text.

    Runs only where it costs no network request (local providers) or in a fix run (before the
    write lock); None when it did not run.
    """
    import numpy as np  # on first use: see docs/performance.md, "Start-up"

    dim = ctx.dim or dim
    if ctx.embedder is None or dim is None or not (ctx.local_embedder or ctx.probe.ran):
        return None
    sampled, differing = 0, {t: [] for t in TABLES}
    for table in TABLES:
        sample: dict[int, bytes] = {}
        for newest, limit in ((True, MODEL_PROBE_NEWEST), (False, MODEL_PROBE_OLDEST)):
            taken = 0
            for batch in sql.iter_embeddings(
                ctx.c, table, ctx.agent_id, batch=64, newest_first=newest, limit=256
            ):
                for i, b in batch:
                    if len(b) == dim * 4 and taken < limit and i not in sample:
                        sample[i], taken = b, taken + 1
                if taken >= limit:
                    break
        if not sample:
            continue
        texts = sql.texts_by_id(ctx.c, table, list(sample))
        ids = [i for i in sample if texts.get(i)]
        fresh, error = ctx.try_embed([texts[i] for i in ids])
        if error is not None or len(fresh) != len(ids):
            return None
        for row_id, new in zip(ids, fresh, strict=True):
            if new is None:
                continue
            sampled += 1
            a = np.frombuffer(sample[row_id], "<f4").astype(np.float64)
            b = np.frombuffer(new, "<f4").astype(np.float64)
            denom = float(np.linalg.norm(a) * np.linalg.norm(b)) or 1.0
            if a.shape != b.shape or float(a @ b) / denom < MODEL_PROBE_MIN_COSINE:
                differing[table].append(row_id)
    if not sampled:
        return None
    return ModelProbe(sampled, {t: ids for t, ids in differing.items() if ids})
