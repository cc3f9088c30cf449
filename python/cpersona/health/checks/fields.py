"""Checks 15-16: memory fields as written (project ids that differ only in case or
punctuation, `source` / `metadata` texts that are not JSON)."""

from __future__ import annotations

import re
from typing import Any

from cpersona.health.check import EVERYWHERE, Check
from cpersona.health.context import HealthContext
from cpersona.health.issue import Issue, finding
from cpersona.health.rows import LockedRows, write_plan
from cpersona.storage.upkeep.handle import project_ids
from cpersona.storage.upkeep.sources import invalid_json_rows, reset_json


@finding("axis_hygiene", "warn", type_name="project_id_naming_drift")
class ProjectIdDrift(Issue):
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


@finding("invalid_json", "warn")
class InvalidJson(LockedRows):
    """Memories whose `source` or `metadata` is not JSON (how many of each): the unlocked
    ones are reset to the empty object."""

    source: int
    metadata: int


def invalid_json(ctx: HealthContext) -> list[InvalidJson]:
    rows = invalid_json_rows(ctx.c, ctx.agent_id)
    return InvalidJson.found(
        rows,
        source=sum(1 for r in rows if not r.source_ok),
        metadata=sum(1 for r in rows if not r.meta_ok),
    )


CHECKS: tuple[Check[Any], ...] = (
    Check("axis_hygiene", "warn", axis_hygiene, (ProjectIdDrift,), EVERYWHERE),
    Check(
        "invalid_json",
        "warn",
        invalid_json,
        (InvalidJson,),
        EVERYWHERE,
        repair=write_plan(reset_json),
    ),
)
