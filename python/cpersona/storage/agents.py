"""Agent ids across the tables that hold them (the per-subject start-up check, surface.md §11.5)."""

from __future__ import annotations

from cpersona.storage.interface import Store

_AGENT_TABLES = ("memories", "episodes", "profiles", "pending_memory_tasks")


def agent_ids_with_prefix(db: Store, exact: str, prefix: str) -> list[str]:
    """Distinct agent ids equal to `exact` or starting with `prefix`, over every table.

    `prefix` is matched with GLOB on its literal characters (it must hold no GLOB wildcard), so
    the agent_id indexes serve the range scan.
    """
    if any(ch in prefix for ch in "*?["):
        raise ValueError(f"prefix {prefix!r} holds a GLOB wildcard")
    union = " UNION ".join(
        f"SELECT agent_id FROM {table} WHERE agent_id = ? OR agent_id GLOB ?"
        for table in _AGENT_TABLES
    )
    params = [exact, prefix + "*"] * len(_AGENT_TABLES)
    return sorted(row[0] for row in db.query(union, params))
