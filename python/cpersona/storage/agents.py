"""Agent ids across the tables that hold them (the per-subject start-up check, surface.md §11.5)."""

from __future__ import annotations

from cpersona.storage.db import Database

_AGENT_TABLES = ("memories", "episodes", "profiles", "pending_memory_tasks")


def agent_ids_with_prefix(db: Database, exact: str, prefix: str) -> list[str]:
    """Distinct agent ids equal to `exact` or starting with `prefix`, over every table.

    `prefix` is matched case-sensitively on its literal characters (`ops.prefix_match`: GLOB
    on SQLite, so the agent_id indexes serve the range scan).
    """
    ops = db.ops
    union = " UNION ".join(
        f"SELECT agent_id FROM {table} WHERE agent_id = ? OR {ops.prefix_match('agent_id')}"
        for table in _AGENT_TABLES
    )
    params = [exact, ops.prefix_param(prefix)] * len(_AGENT_TABLES)
    return sorted(row[0] for row in db.query(union, params))
