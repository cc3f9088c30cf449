"""Checks 1-4: memory text (CPersona's annotation prefix, Discord mentions, text over the
length cap, duplicate rows). Repairs skip locked rows."""

from __future__ import annotations

import re
from typing import Any

from cpersona.health.check import EVERYWHERE, Check
from cpersona.health.context import HealthContext
from cpersona.health.issue import UNSET, Reembedded, finding
from cpersona.health.rows import LockedRows, Planned, write_plan
from cpersona.storage.upkeep.texts import (
    delete_unlocked_memories,
    duplicate_groups,
    memories_containing,
    oversized_memories,
    rewrite_content,
    truncate_memories,
)

ANNOTATION = re.compile(r"\[Memory from [^\]]+\]\s*")
MENTION = re.compile(r"\s*<@!?\d+>")


@finding(severity="info")
class Rewrite(Reembedded, Planned[tuple[int, str]]):
    """Memories holding what the check strips from their text; the plan is (id, new text) of
    the unlocked rows the strip changes."""

    count: int
    locked: int
    sample_ids: list[int]
    rewritten: int = UNSET
    deleted_collisions: int = UNSET
    _tail = (
        "repairable",
        "sample_ids",
        "fixed",
        "rewritten",
        "deleted_collisions",
        "fix_error",
        "re_embedded",
    )


def _rewrite_check(
    ctx: HealthContext, check: str, needle: str, pattern: re.Pattern[str]
) -> list[Rewrite]:
    rows = memories_containing(ctx.c, needle, ctx.agent_id)
    if not rows:
        return []
    plan = []
    for r in rows:
        new = pattern.sub("", r.content).strip()
        if not r.locked and new != r.content:
            plan.append((int(r.id), new))
    return [
        Rewrite(
            type=check,
            check=check,
            count=len(rows),
            locked=sum(1 for r in rows if r.locked),
            repairable=len(plan),
            sample_ids=[int(r.id) for r in rows[:10]],
            plan=plan,
        )
    ]


def _rewrite(ctx: HealthContext, issues: list[Rewrite]) -> None:
    handle = ctx.write_handle
    done: dict[str, list[int]] = {"updated": [], "deleted": []}
    for row_id, text in (step for i in issues for step in i.plan):
        outcome = rewrite_content(handle, row_id, text)
        if outcome in done:
            done[outcome].append(row_id)
    for i in issues:
        i.fixed = len(done["updated"]) + len(done["deleted"])
        i.rewritten = len(done["updated"])
        i.deleted_collisions = len(done["deleted"])
        i.nulled = {"memories": done["updated"]}


def memory_annotation(ctx: HealthContext) -> list[Rewrite]:
    return _rewrite_check(ctx, "memory_annotation", "[Memory from", ANNOTATION)


def discord_mention(ctx: HealthContext) -> list[Rewrite]:
    return _rewrite_check(ctx, "discord_mention", "<@", MENTION)


@finding("oversized_content", "warn")
class OversizedContent(Reembedded, LockedRows):
    max_len: int
    cap: int
    lossy: bool = UNSET
    _tail = ("locked", "repairable", "fixed", "lossy", "fix_error", "re_embedded")


def oversized_content(ctx: HealthContext) -> list[OversizedContent]:
    cap = ctx.settings.max_content_length
    rows = oversized_memories(ctx.c, cap, ctx.agent_id)
    longest = max((int(r.n) for r in rows), default=0)
    return OversizedContent.found(rows, max_len=longest, cap=cap)


def cut_content(ctx: HealthContext, issues: list[OversizedContent]) -> None:
    ids = [row_id for i in issues for row_id in i.plan]
    clashed = truncate_memories(ctx.write_handle, ids, ctx.settings.max_content_length)
    cut = [i for i in ids if i not in set(clashed)]
    for i in issues:
        i.fixed, i.lossy = len(cut), True
        if clashed:
            i.fix_error = (
                f"{len(clashed)} rows would duplicate another row once cut and "
                "were left as they are"
            )
        i.nulled = {"memories": cut}


@finding("duplicate_content", "warn")
class DuplicateContent(Planned[int]):
    """Groups of memories with the same text; the plan is every unlocked row of a group but
    its survivor (the lowest id of the channel-global bucket)."""

    groups: int
    total_extra: int


def duplicate_content(ctx: HealthContext) -> list[DuplicateContent]:
    groups = duplicate_groups(ctx.c, ctx.agent_id)
    if not groups:
        return []
    doomed: list[int] = []
    for group in groups:
        pool = [r for r in group if r.channel == ""] or group
        survivor = min(int(r.id) for r in pool)
        doomed += [int(r.id) for r in group if int(r.id) != survivor and not r.locked]
    return [
        DuplicateContent(
            groups=len(groups),
            total_extra=sum(len(g) - 1 for g in groups),
            repairable=len(doomed),
            plan=doomed,
        )
    ]


CHECKS: tuple[Check[Any], ...] = (
    Check("memory_annotation", "info", memory_annotation, (Rewrite,), EVERYWHERE, repair=_rewrite),
    Check("discord_mention", "info", discord_mention, (Rewrite,), EVERYWHERE, repair=_rewrite),
    Check(
        "oversized_content",
        "warn",
        oversized_content,
        (OversizedContent,),
        EVERYWHERE,
        repair=cut_content,
    ),
    Check(
        "duplicate_content",
        "warn",
        duplicate_content,
        (DuplicateContent,),
        EVERYWHERE,
        repair=write_plan(delete_unlocked_memories),
    ),
)
