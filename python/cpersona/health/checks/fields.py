"""Checks 15-16: memory fields as written (project ids that differ only in case or
punctuation, `source` / `metadata` texts that are not JSON)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from cpersona.health.check import EVERYWHERE, Check
from cpersona.health.context import HealthContext
from cpersona.health.issue import INTERNAL, Fixable, Issue, fix_together
from cpersona.storage.upkeep.handle import project_ids
from cpersona.storage.upkeep.sources import invalid_json_rows, reset_json


@dataclass(kw_only=True, eq=False)
class ProjectIdDrift(Issue):
    type: str = "project_id_naming_drift"
    severity: str = "warn"
    check: str = "axis_hygiene"
    clusters: list[list[str]]


def axis_hygiene(ctx: HealthContext) -> list[ProjectIdDrift]:
    clusters: dict[str, set[str]] = {}
    for value in project_ids(ctx.c, ctx.agent_id):
        if value:
            clusters.setdefault(re.sub(r"[^a-z0-9]", "", value.lower()), set()).add(value)
    drift = sorted(sorted(v) for v in clusters.values() if len(v) > 1)
    if not drift:
        return []
    return [ProjectIdDrift(clusters=drift)]


@dataclass(kw_only=True, eq=False)
class InvalidJson(Fixable):
    type: str = "invalid_json"
    severity: str = "warn"
    check: str = "invalid_json"
    count: int
    source: int
    metadata: int
    locked: int
    ids: list[int] = field(default_factory=list, repr=False, metadata=INTERNAL)


def invalid_json(ctx: HealthContext) -> list[InvalidJson]:
    rows = invalid_json_rows(ctx.c, ctx.agent_id)
    if not rows:
        return []
    ids = [int(r.id) for r in rows if not r.locked]
    return [
        InvalidJson(
            count=len(rows),
            source=sum(1 for r in rows if not r.source_ok),
            metadata=sum(1 for r in rows if not r.meta_ok),
            locked=len(rows) - len(ids),
            repairable=len(ids),
            ids=ids,
        )
    ]


def reset_invalid_json(ctx: HealthContext, issues: list[InvalidJson]) -> None:
    fix_together(issues, lambda i: i.ids, partial(reset_json, ctx.write_handle))


CHECKS: tuple[Check[Any], ...] = (
    Check("axis_hygiene", "warn", axis_hygiene, (ProjectIdDrift,), EVERYWHERE),
    Check(
        "invalid_json",
        "warn",
        invalid_json,
        (InvalidJson,),
        EVERYWHERE,
        repair=reset_invalid_json,
    ),
)
