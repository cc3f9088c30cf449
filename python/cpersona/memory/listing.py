"""Browsing: `list_memories`, `list_episodes`, `get_profile` with their character budgets."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from cpersona.config import Settings
from cpersona.models import Episode, Memory, ProjectFilter
from cpersona.storage import Store
from cpersona.storage import episodes as episode_sql
from cpersona.storage import memories as memory_sql
from cpersona.storage import profiles as profile_sql
from cpersona.timerange import TimeRange

T = TypeVar("T")

#: Content characters list_memories returns whole before degrading rows (surface.md §4.4).
MEMORY_LIST_BUDGET = 1_000_000
#: Summary + keywords characters list_episodes returns whole (surface.md §4.5).
EPISODE_LIST_BUDGET = 800_000
MEMORY_LIST_MAX = 500
EPISODE_LIST_MAX = 200


def _source_object(text: str) -> Any:
    try:
        value = json.loads(text) if text else {}
    except ValueError:
        return {}
    return value if value is not None else {}


def _memory_row(m: Memory) -> dict[str, Any]:
    return {
        "id": m.id,
        "agent_id": m.agent_id,
        "project_id": m.project_id,
        "content": m.content,
        "source": _source_object(m.source),
        "timestamp": m.timestamp,
        "created_at": m.created_at,
        "locked": m.locked,
        "channel": m.channel,
    }


def _episode_row(e: Episode) -> dict[str, Any]:
    return {
        "id": e.id,
        "agent_id": e.agent_id,
        "project_id": e.project_id,
        "summary": e.summary,
        "keywords": e.keywords,
        "start_time": e.start_time,
        "end_time": e.end_time,
        "created_at": e.created_at,
    }


@dataclass(frozen=True, slots=True)
class _Listing(Generic[T]):
    """One listing tool: its rows newest first (at most `most`), each as the answer's dict,
    under `key`, cut to previews (`ref` kind `kind`) past `budget` characters of `fields`."""

    key: str
    newest: Callable[..., list[T]]
    row: Callable[[T], dict[str, Any]]
    most: int
    fields: tuple[str, ...]
    budget: int
    kind: str

    def __call__(
        self,
        db: Store,
        settings: Settings,
        agent_id: str,
        project: ProjectFilter,
        limit: int,
        span: TimeRange | None = None,
    ) -> dict[str, Any]:
        limit = max(0, min(limit, self.most))
        with db.snapshot():  # one state, however many statements the listing takes
            found = self.newest(db, agent_id or None, project, limit, span=span)
        rows = [self.row(r) for r in found]
        degraded = _over_budget(
            rows, self.fields, self.budget, settings.recall_preview_chars, self.kind
        )
        result: dict[str, Any] = {self.key: rows, "count": len(rows)}
        if degraded:
            result["budget_chars"] = self.budget
        return result


list_memories = _Listing(
    "memories",
    memory_sql.list_newest,
    _memory_row,
    MEMORY_LIST_MAX,
    ("content",),
    MEMORY_LIST_BUDGET,
    "mem",
)
list_episodes = _Listing(
    "episodes",
    episode_sql.list_newest,
    _episode_row,
    EPISODE_LIST_MAX,
    ("summary", "keywords"),
    EPISODE_LIST_BUDGET,
    "ep",
)


def _over_budget(
    rows: list[dict[str, Any]], fields: tuple[str, ...], budget: int, cap: int, kind: str
) -> bool:
    """Spend `budget` characters of `fields` front to back (the first row always whole); past
    it, cut each field longer than `cap` to a prefix with `<field>_len`, `<field>_truncated`
    and a `ref` to expand. Rows are never dropped. True if any row was cut.
    """
    if cap <= 0:
        return False
    spent = 0
    over = False
    degraded = False
    for i, row in enumerate(rows):
        size = sum(len(row[f]) for f in fields)
        if not over and (i == 0 or spent + size <= budget):
            spent += size
            continue
        over = True
        for f in fields:
            if len(row[f]) > cap:
                row[f"{f}_len"] = len(row[f])
                row[f] = row[f][:cap]
                row[f"{f}_truncated"] = True
                row["ref"] = f"{kind}:{row['id']}"
                degraded = True
    return degraded


def get_profile(db: Store, agent_id: str) -> dict[str, Any]:
    return {"profile": profile_sql.get(db, agent_id) or ""}
