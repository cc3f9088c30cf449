"""Checks 23-27: whole records (agents without a profile, empty memories, sources without a
canonical type, profiles over the length cap, anonymous sources)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from cpersona.health.check import EVERYWHERE, Check
from cpersona.health.context import HealthContext
from cpersona.health.issue import INTERNAL, UNSET, Fixable, Issue, fix_together
from cpersona.memory.text import normalize_source, py_json
from cpersona.storage.upkeep.sources import anonymous_sources, set_sources, untyped_sources
from cpersona.storage.upkeep.texts import (
    agents_without_profile,
    delete_unlocked_memories,
    empty_content_rows,
    oversized_profiles,
    truncate_profiles,
)


@dataclass(kw_only=True, eq=False)
class MissingProfile(Issue):
    type: str = "missing_profile"
    severity: str = "info"
    check: str = "missing_profile"
    count: int
    agents: list[str]


def missing_profile(ctx: HealthContext) -> list[MissingProfile]:
    agents = agents_without_profile(ctx.c, ctx.agent_id)
    if not agents:
        return []
    return [MissingProfile(count=len(agents), agents=agents[:50])]


@dataclass(kw_only=True, eq=False)
class EmptyContent(Fixable):
    type: str = "empty_content"
    severity: str = "warn"
    check: str = "empty_content"
    count: int
    locked: int
    ids: list[int] = field(default_factory=list, repr=False, metadata=INTERNAL)


def empty_content(ctx: HealthContext) -> list[EmptyContent]:
    rows = empty_content_rows(ctx.c, ctx.agent_id)
    if not rows:
        return []
    ids = [int(r.id) for r in rows if not r.locked]
    return [
        EmptyContent(count=len(rows), locked=len(rows) - len(ids), repairable=len(ids), ids=ids)
    ]


def delete_empty(ctx: HealthContext, issues: list[EmptyContent]) -> None:
    fix_together(issues, lambda i: i.ids, partial(delete_unlocked_memories, ctx.write_handle))


@dataclass(kw_only=True, eq=False)
class InvalidSourceType(Fixable):
    type: str = "invalid_source_type"
    check: str = "invalid_source_type"
    count: int
    mappable: int
    unmapped: int
    locked: int
    remaining: int
    mapped: int = UNSET
    #: (id, the canonical source text) of the unlocked rows that map.
    plan: list[tuple[int, str]] = field(default_factory=list, repr=False, metadata=INTERNAL)
    _tail = ("repairable", "fixed", "mapped", "fix_error")


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


def map_sources(ctx: HealthContext, issues: list[InvalidSourceType]) -> None:
    mapped = fix_together(issues, lambda i: i.plan, partial(set_sources, ctx.write_handle))
    for i in issues:
        i.mapped = mapped


@dataclass(kw_only=True, eq=False)
class OversizedProfile(Fixable):
    type: str = "oversized_profile"
    severity: str = "warn"
    check: str = "oversized_profile"
    count: int
    max_len: int
    cap: int
    lossy: bool = UNSET
    ids: list[int] = field(default_factory=list, repr=False, metadata=INTERNAL)
    _tail = ("repairable", "fixed", "lossy", "fix_error")


def oversized_profile(ctx: HealthContext) -> list[OversizedProfile]:
    cap = ctx.settings.max_profile_length
    rows = oversized_profiles(ctx.c, cap, ctx.agent_id)
    if not rows:
        return []
    return [
        OversizedProfile(
            count=len(rows),
            max_len=max(int(r.n) for r in rows),
            cap=cap,
            repairable=len(rows),
            ids=[int(r.id) for r in rows],
        )
    ]


def cut_profiles(ctx: HealthContext, issues: list[OversizedProfile]) -> None:
    cap = ctx.settings.max_profile_length
    fix_together(issues, lambda i: i.ids, lambda ids: truncate_profiles(ctx.write_handle, ids, cap))
    for i in issues:
        i.lossy = True


@dataclass(kw_only=True, eq=False)
class AnonymousSource(Issue):
    type: str = "anonymous_source"
    severity: str = "info"
    check: str = "anonymous_source"
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
    Check("empty_content", "warn", empty_content, (EmptyContent,), EVERYWHERE, repair=delete_empty),
    Check(
        "invalid_source_type",
        "warn",
        invalid_source_type,
        (InvalidSourceType,),
        EVERYWHERE,
        repair=map_sources,
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
