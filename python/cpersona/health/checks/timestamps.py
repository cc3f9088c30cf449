"""Checks 17-22: time (memory timestamps that do not parse or lie in the future, episodes
without a start, stamps in mixed forms, pending tasks left over an hour). Repairs take the
row's `created_at` where the stamp is lost and rewrite offsets as UTC; locked rows are kept."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC
from functools import partial
from typing import Any

from cpersona.health.check import EVERYWHERE, Check
from cpersona.health.context import HealthContext
from cpersona.health.issue import INTERNAL, UNSET, Fixable, fix_together
from cpersona.memory.text import parse_utc
from cpersona.storage.upkeep.stamps import (
    StampFlag,
    delete_tasks,
    episode_times,
    episodes_without_start,
    future_timestamps,
    memory_timestamps,
    set_episode_times,
    set_timestamps,
    stale_tasks,
    start_times_from_created_at,
    timestamps_from_created_at,
    unparseable_timestamps,
)

_OFFSET = re.compile(r"(Z|z|[+-]\d{2}:?\d{2})$")
_UTC_OFFSETS = ("Z", "z", "+00:00", "-00:00", "+0000", "-0000")
STALE_TASK_HOURS = 1


@dataclass(kw_only=True, eq=False)
class BadTimestamps(Fixable):
    """Memories whose `timestamp` does not parse (`invalid_timestamp`) or lies ahead of now
    by more than the allowed skew (`future_timestamp`)."""

    severity: str = "warn"
    count: int
    sample_ids: list[int]
    #: Unlocked rows whose created_at can stand in.
    ids: list[int] = field(default_factory=list, repr=False, metadata=INTERNAL)
    _tail = ("repairable", "sample_ids", "fixed", "fix_error")


def _timestamp_rows(check: str, rows: list[StampFlag]) -> list[BadTimestamps]:
    if not rows:
        return []
    ids = [int(r.id) for r in rows if not r.locked and r.fixable]
    return [
        BadTimestamps(
            type=check,
            check=check,
            count=len(rows),
            repairable=len(ids),
            sample_ids=[int(r.id) for r in rows[:10]],
            ids=ids,
        )
    ]


def invalid_timestamp(ctx: HealthContext) -> list[BadTimestamps]:
    return _timestamp_rows("invalid_timestamp", unparseable_timestamps(ctx.c, ctx.agent_id))


def future_timestamp(ctx: HealthContext) -> list[BadTimestamps]:
    skew = ctx.settings.future_timestamp_skew_seconds
    return _timestamp_rows("future_timestamp", future_timestamps(ctx.c, skew, ctx.agent_id))


def stamp_from_created_at(ctx: HealthContext, issues: list[BadTimestamps]) -> None:
    fix_together(issues, lambda i: i.ids, partial(timestamps_from_created_at, ctx.write_handle))


@dataclass(kw_only=True, eq=False)
class MissingStartTime(Fixable):
    type: str = "missing_episode_start_time"
    severity: str = "info"
    check: str = "missing_episode_start_time"
    count: int
    ids: list[int] = field(default_factory=list, repr=False, metadata=INTERNAL)


def missing_episode_start_time(ctx: HealthContext) -> list[MissingStartTime]:
    ids = episodes_without_start(ctx.c, ctx.agent_id)
    if not ids:
        return []
    return [MissingStartTime(count=len(ids), repairable=len(ids), ids=ids)]


def start_from_created_at(ctx: HealthContext, issues: list[MissingStartTime]) -> None:
    fix_together(issues, lambda i: i.ids, partial(start_times_from_created_at, ctx.write_handle))


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


@dataclass(kw_only=True, eq=False)
class FormatDrift(Fixable):
    """Stamps in more than one form (UTC, another offset, naive) among memories
    (`timestamp_format_drift`) or episode spans (`episode_timestamp_format_drift`)."""

    severity: str = "warn"
    utc: int
    aware: int
    naive: int
    unfixable_naive: int
    unfixable_locked: int = UNSET
    #: (id, new timestamp) of memories, (id, new start, new end) of episodes.
    plan: list[Any] = field(default_factory=list, repr=False, metadata=INTERNAL)


def timestamp_format_drift(ctx: HealthContext) -> list[FormatDrift]:
    counts = {"utc": 0, "aware": 0, "naive": 0}
    plan: list[tuple[int, str]] = []
    locked = 0
    for r in memory_timestamps(ctx.c, ctx.agent_id):
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
    return [
        FormatDrift(
            type="timestamp_format_drift",
            check="timestamp_format_drift",
            **counts,
            unfixable_naive=counts["naive"] if forms > 1 else 0,
            unfixable_locked=locked,
            repairable=len(plan),
            plan=plan,
        )
    ]


def episode_timestamp_format_drift(ctx: HealthContext) -> list[FormatDrift]:
    counts = {"utc": 0, "aware": 0, "naive": 0}
    plan: list[tuple[int, str | None, str | None]] = []
    unfixable = 0
    for r in episode_times(ctx.c, ctx.agent_id):
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
    return [
        FormatDrift(
            type="episode_timestamp_format_drift",
            check="episode_timestamp_format_drift",
            **counts,
            unfixable_naive=unfixable,
            repairable=len(plan),
            plan=plan,
        )
    ]


def rewrite_memory_stamps(ctx: HealthContext, issues: list[FormatDrift]) -> None:
    fix_together(issues, lambda i: i.plan, partial(set_timestamps, ctx.write_handle))


def rewrite_episode_stamps(ctx: HealthContext, issues: list[FormatDrift]) -> None:
    fix_together(issues, lambda i: i.plan, partial(set_episode_times, ctx.write_handle))


@dataclass(kw_only=True, eq=False)
class StalePendingTasks(Fixable):
    type: str = "stale_pending_tasks"
    severity: str = "warn"
    check: str = "stale_pending_tasks"
    count: int
    older_than_hours: int = STALE_TASK_HOURS
    ids: list[int] = field(default_factory=list, repr=False, metadata=INTERNAL)


def stale_pending_tasks(ctx: HealthContext) -> list[StalePendingTasks]:
    ids = stale_tasks(ctx.c, ctx.agent_id, STALE_TASK_HOURS)
    if not ids:
        return []
    return [StalePendingTasks(count=len(ids), repairable=len(ids), ids=ids)]


def drop_stale_tasks(ctx: HealthContext, issues: list[StalePendingTasks]) -> None:
    fix_together(issues, lambda i: i.ids, partial(delete_tasks, ctx.write_handle))


CHECKS: tuple[Check[Any], ...] = (
    Check(
        "invalid_timestamp",
        "warn",
        invalid_timestamp,
        (BadTimestamps,),
        EVERYWHERE,
        repair=stamp_from_created_at,
    ),
    Check(
        "future_timestamp",
        "warn",
        future_timestamp,
        (BadTimestamps,),
        EVERYWHERE,
        repair=stamp_from_created_at,
    ),
    Check(
        "missing_episode_start_time",
        "info",
        missing_episode_start_time,
        (MissingStartTime,),
        EVERYWHERE,
        repair=start_from_created_at,
    ),
    Check(
        "timestamp_format_drift",
        "warn",
        timestamp_format_drift,
        (FormatDrift,),
        EVERYWHERE,
        repair=rewrite_memory_stamps,
    ),
    Check(
        "episode_timestamp_format_drift",
        "warn",
        episode_timestamp_format_drift,
        (FormatDrift,),
        EVERYWHERE,
        repair=rewrite_episode_stamps,
    ),
    Check(
        "stale_pending_tasks",
        "warn",
        stale_pending_tasks,
        (StalePendingTasks,),
        EVERYWHERE,
        repair=drop_stale_tasks,
    ),
)
