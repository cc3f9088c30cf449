"""Checks 23-27: whole records (agents without a profile, empty memories, sources without a
canonical type, profiles over the length cap, anonymous sources)."""

from __future__ import annotations

import json
from typing import Any

from cpersona.health.check import EVERYWHERE, Check
from cpersona.health.context import HealthContext
from cpersona.health.issue import UNSET, Issue, finding
from cpersona.health.rows import LockedRows, Planned, Rows, write_plan, write_plans
from cpersona.memory.text import normalize_source, py_json
from cpersona.storage.upkeep.sources import anonymous_sources, set_sources, untyped_sources
from cpersona.storage.upkeep.texts import (
    agents_without_profile,
    delete_unlocked_memories,
    empty_content_rows,
    oversized_profiles,
    truncate_profiles,
)


@finding("missing_profile", "info")
class MissingProfile(Issue):
    count: int
    agents: list[str]


def missing_profile(ctx: HealthContext) -> list[MissingProfile]:
    agents = agents_without_profile(ctx.c, ctx.agent_id)
    if not agents:
        return []
    return [MissingProfile(count=len(agents), agents=agents[:50])]


@finding("empty_content", "warn")
class EmptyContent(LockedRows):
    """Memories whose text is blank: the unlocked ones are deleted."""


def empty_content(ctx: HealthContext) -> list[EmptyContent]:
    return EmptyContent.found(empty_content_rows(ctx.c, ctx.agent_id))


@finding("invalid_source_type")
class InvalidSourceType(Planned[tuple[int, str]]):
    """Sources without a canonical type; the plan is (id, the canonical source text) of the
    unlocked rows that map."""

    count: int
    mappable: int
    unmapped: int
    locked: int
    remaining: int
    mapped: int = UNSET
    _tail = ("repairable", "fixed", "mapped", "fix_error")

    def wrote(self, rows: int) -> None:
        self.fixed = self.mapped = rows


def invalid_source_type(ctx: HealthContext) -> list[InvalidSourceType]:
    rows = untyped_sources(ctx.c, ctx.agent_id)
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
    return [
        InvalidSourceType(
            severity="warn" if plan else "info",
            count=len(rows),
            mappable=len(plan),
            unmapped=unmapped,
            locked=locked,
            remaining=max(0, len(rows) - cap),
            repairable=len(plan),
            plan=plan,
        )
    ]


@finding("oversized_profile", "warn")
class OversizedProfile(Rows):
    max_len: int
    cap: int
    lossy: bool = UNSET
    _tail = ("repairable", "fixed", "lossy", "fix_error")

    def wrote(self, rows: int) -> None:
        self.fixed, self.lossy = rows, True


def oversized_profile(ctx: HealthContext) -> list[OversizedProfile]:
    cap = ctx.settings.max_profile_length
    rows = oversized_profiles(ctx.c, cap, ctx.agent_id)
    longest = max((int(r.n) for r in rows), default=0)
    return OversizedProfile.found([int(r.id) for r in rows], max_len=longest, cap=cap)


def cut_profiles(ctx: HealthContext, issues: list[OversizedProfile]) -> None:
    cap = ctx.settings.max_profile_length
    write_plans(ctx, issues, lambda handle, ids: truncate_profiles(handle, ids, cap))


@finding("anonymous_source", "info")
class AnonymousSource(Issue):
    count: int
    unattributed: int
    hint: str = "deep_check anonymous_source recovers names written as '[name] ...'"


def anonymous_source(ctx: HealthContext) -> list[AnonymousSource]:
    sentinel, unattributed = anonymous_sources(ctx.c, ctx.agent_id)
    if not sentinel and not unattributed:
        return []
    return [AnonymousSource(count=sentinel, unattributed=unattributed)]


CHECKS: tuple[Check[Any], ...] = (
    Check("missing_profile", "info", missing_profile, (MissingProfile,), EVERYWHERE),
    Check(
        "empty_content",
        "warn",
        empty_content,
        (EmptyContent,),
        EVERYWHERE,
        repair=write_plan(delete_unlocked_memories),
    ),
    Check(
        "invalid_source_type",
        "warn",
        invalid_source_type,
        (InvalidSourceType,),
        EVERYWHERE,
        repair=write_plan(set_sources),
    ),
    Check(
        "oversized_profile",
        "warn",
        oversized_profile,
        (OversizedProfile,),
        EVERYWHERE,
        repair=cut_profiles,
    ),
    Check("anonymous_source", "info", anonymous_source, (AnonymousSource,), EVERYWHERE),
)
