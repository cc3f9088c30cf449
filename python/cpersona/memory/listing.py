"""Browsing: `list_memories`, `list_episodes`, `get_profile` with their character budgets."""

from __future__ import annotations

import json
from typing import Any

from cpersona.config import Settings
from cpersona.models import Episode, Memory, ProjectFilter
from cpersona.storage import Database
from cpersona.storage import episodes as episode_sql
from cpersona.storage import memories as memory_sql
from cpersona.storage import profiles as profile_sql

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


def list_memories(
    db: Database, settings: Settings, agent_id: str, project: ProjectFilter, limit: int
) -> dict[str, Any]:
    limit = max(0, min(limit, MEMORY_LIST_MAX))
    rows = memory_sql.list_newest(db, agent_id or None, project, limit)
    out = [_memory_row(m) for m in rows]
    cap = settings.recall_preview_chars
    degraded = False
    if cap > 0:
        spent = 0
        over = False
        for i, row in enumerate(out):
            size = len(row["content"])
            if not over and (i == 0 or spent + size <= MEMORY_LIST_BUDGET):
                spent += size
                continue
            over = True
            if size > cap:
                row["content_len"] = size
                row["content"] = row["content"][:cap]
                row["content_truncated"] = True
                row["ref"] = f"mem:{row['id']}"
                degraded = True
    result: dict[str, Any] = {"memories": out, "count": len(out)}
    if degraded:
        result["budget_chars"] = MEMORY_LIST_BUDGET
    return result


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


def list_episodes(
    db: Database, settings: Settings, agent_id: str, project: ProjectFilter, limit: int
) -> dict[str, Any]:
    limit = max(0, min(limit, EPISODE_LIST_MAX))
    rows = episode_sql.list_newest(db, agent_id or None, project, limit)
    out = [_episode_row(e) for e in rows]
    cap = settings.recall_preview_chars
    degraded = False
    if cap > 0:
        spent = 0
        over = False
        for i, row in enumerate(out):
            size = len(row["summary"]) + len(row["keywords"])
            if not over and (i == 0 or spent + size <= EPISODE_LIST_BUDGET):
                spent += size
                continue
            over = True
            for key in ("summary", "keywords"):
                if len(row[key]) > cap:
                    row[f"{key}_len"] = len(row[key])
                    row[key] = row[key][:cap]
                    row[f"{key}_truncated"] = True
                    row["ref"] = f"ep:{row['id']}"
                    degraded = True
    result: dict[str, Any] = {"episodes": out, "count": len(out)}
    if degraded:
        result["budget_chars"] = EPISODE_LIST_BUDGET
    return result


def get_profile(db: Database, agent_id: str) -> dict[str, Any]:
    return {"profile": profile_sql.get(db, agent_id) or ""}
