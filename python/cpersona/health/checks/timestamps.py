"""Checks 17-22: time (memory timestamps that do not parse or lie in the future, episodes
without a start, stamps in mixed forms, pending tasks left over an hour). Repairs take the
row's `created_at` where the stamp is lost and rewrite offsets as UTC; locked rows are kept."""

from __future__ import annotations

import re
from datetime import UTC
from typing import Any, Self

from cpersona.health.check import EVERYWHERE, Check
from cpersona.health.context import HealthContext
from cpersona.health.issue import UNSET, finding
from cpersona.health.rows import Planned, Rows, write_plan
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


@finding(severity="warn")
class BadTimestamps(Planned[int]):
    """Memories whose `timestamp` does not parse (`invalid_timestamp`) or lies ahead of now
    by more than the allowed skew (`future_timestamp`); the plan is the unlocked rows whose
    created_at can stand in."""

    count: int
    sample_ids: list[int]
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
            plan=ids,
        )
    ]


def invalid_timestamp(ctx: HealthContext) -> list[BadTimestamps]:
    return _timestamp_rows("invalid_timestamp", unparseable_timestamps(ctx.c, ctx.agent_id))


def future_timestamp(ctx: HealthContext) -> list[BadTimestamps]:
    skew = ctx.settings.future_timestamp_skew_seconds
    return _timestamp_rows("future_timestamp", future_timestamps(ctx.c, skew, ctx.agent_id))


@finding("missing_episode_start_time", "info")
class MissingStartTime(Rows):
    """Episodes without a start: it is taken from their created_at."""


def missing_episode_start_time(ctx: HealthContext) -> list[MissingStartTime]:
    return MissingStartTime.found(episodes_without_start(ctx.c, ctx.agent_id))


def stamp_class(stamp: str) -> str | None:
    """`utc`, `aware` (another offset) or `naive`; None when it does not parse."""
    if parse_utc(stamp) is None:
        return None
    match = _OFFSET.search(stamp.strip())
    if match is None:
        return "naive"
    return "utc" if match.group(1) in _UTC_OFFSETS else "aware"


def to_utc(stamp: str | None) -> str:
    """A stamp `StampForms.see` found "aware" (so neither empty nor unparsable), in UTC."""
    instant = parse_utc(stamp) if stamp else None
    assert instant is not None
    return instant.astimezone(UTC).isoformat()


class StampForms:
    """How many stamps of each form (`stamp_class`) a drift check has seen."""

    def __init__(self) -> None:
        self.counts = {"utc": 0, "aware": 0, "naive": 0}

    def see(self, stamp: str | None) -> str | None:
        """The stamp's form, counted; None for an empty stamp or one that does not parse."""
        kind = stamp_class(stamp) if stamp else None
        if kind is not None:
            self.counts[kind] += 1
        return kind

    @property
    def mixed(self) -> bool:
        return sum(1 for n in self.counts.values() if n) > 1


@finding(severity="warn")
class FormatDrift(Planned[Any]):
    """Stamps in more than one form (UTC, another offset, naive) among memories
    (`timestamp_format_drift`: the plan is (id, new timestamp)) or episode spans
    (`episode_timestamp_format_drift`: (id, new start, new end))."""

    utc: int
    aware: int
    naive: int
    unfixable_naive: int
    unfixable_locked: int = UNSET

    @classmethod
    def found(
        cls,
        check: str,
        forms: StampForms,
        plan: list[Any],
        *,
        unfixable_naive: int,
        unfixable_locked: int = UNSET,
    ) -> list[Self]:
        """The finding of `check` when a stamp has another offset or the forms are mixed."""
        if not forms.counts["aware"] and not forms.mixed:
            return []
        counts = forms.counts
        return [
            cls(
                type=check,
                check=check,
                utc=counts["utc"],
                aware=counts["aware"],
                naive=counts["naive"],
                repairable=len(plan),
                plan=plan,
                unfixable_naive=unfixable_naive,
                unfixable_locked=unfixable_locked,
            )
        ]


def timestamp_format_drift(ctx: HealthContext) -> list[FormatDrift]:
    forms = StampForms()
    plan: list[tuple[int, str]] = []
    locked = 0
    for r in memory_timestamps(ctx.c, ctx.agent_id):
        if forms.see(r.timestamp) == "aware":
            if r.locked:
                locked += 1
            else:
                plan.append((int(r.id), to_utc(r.timestamp)))
    naive = forms.counts["naive"] if forms.mixed else 0
    return FormatDrift.found(
        "timestamp_format_drift", forms, plan, unfixable_naive=naive, unfixable_locked=locked
    )


def episode_timestamp_format_drift(ctx: HealthContext) -> list[FormatDrift]:
    forms = StampForms()
    plan: list[tuple[int, str | None, str | None]] = []
    unfixable = 0
    for r in episode_times(ctx.c, ctx.agent_id):
        new: list[str | None] = []
        changed = False
        for stamp in (r.start_time, r.end_time):
            kind = forms.see(stamp)
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
    return FormatDrift.found(
        "episode_timestamp_format_drift", forms, plan, unfixable_naive=unfixable
    )


@finding("stale_pending_tasks", "warn")
class StalePendingTasks(Rows):
    """Pending memory tasks left over an hour: they are deleted."""

    older_than_hours: int = STALE_TASK_HOURS


def stale_pending_tasks(ctx: HealthContext) -> list[StalePendingTasks]:
    return StalePendingTasks.found(stale_tasks(ctx.c, ctx.agent_id, STALE_TASK_HOURS))


CHECKS: tuple[Check[Any], ...] = (
    Check(
        "invalid_timestamp",
        "warn",
        invalid_timestamp,
        (BadTimestamps,),
        EVERYWHERE,
        repair=write_plan(timestamps_from_created_at),
    ),
    Check(
        "future_timestamp",
        "warn",
        future_timestamp,
        (BadTimestamps,),
        EVERYWHERE,
        repair=write_plan(timestamps_from_created_at),
    ),
    Check(
        "missing_episode_start_time",
        "info",
        missing_episode_start_time,
        (MissingStartTime,),
        EVERYWHERE,
        repair=write_plan(start_times_from_created_at),
    ),
    Check(
        "timestamp_format_drift",
        "warn",
        timestamp_format_drift,
        (FormatDrift,),
        EVERYWHERE,
        repair=write_plan(set_timestamps),
    ),
    Check(
        "episode_timestamp_format_drift",
        "warn",
        episode_timestamp_format_drift,
        (FormatDrift,),
        EVERYWHERE,
        repair=write_plan(set_episode_times),
    ),
    Check(
        "stale_pending_tasks",
        "warn",
        stale_pending_tasks,
        (StalePendingTasks,),
        EVERYWHERE,
        repair=write_plan(delete_tasks),
    ),
)
