"""`delete_agent_data` (surface.md §4.9) and what goes with an agent that is gone."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from cpersona.storage import bulk
from cpersona.storage.error_kinds import StorageError

if TYPE_CHECKING:
    from cpersona.portability.host import Host

log = logging.getLogger("cpersona.portability")


def delete_agent_data(engine: Host, agent_id: str, *, paused: bool = False) -> dict[str, Any]:
    """Delete every row of one agent; the tool's response object.

    One transaction removes its memories (locked ones too: a lock guards single edits and
    deletes, not the agent's removal), episodes, profiles and pending tasks, in every project
    and channel. Then its calibration is dropped (in memory and in the sidecar) and the vector
    indexes are brought current, so a recall for the agent finds nothing at once.

    `paused` is the no-persist hook (issue 5): nothing is deleted and the zero counts come
    back; the pause feature adds its markers.
    """
    if paused:  # checked first (surface.md §4.9)
        return _counts(agent_id, bulk.AgentRows(0, 0, 0, 0))
    if not agent_id:
        return {"ok": False, "error": "agent_id is required for bulk deletion"}
    try:
        removed = bulk.delete_agent_rows(engine.db, agent_id)
    except StorageError as exc:
        return {"ok": False, "error": f"could not delete agent {agent_id!r}: {exc}"}
    forget_agent(engine, agent_id)
    engine.after_write()
    if engine.remote is not None:
        engine.remote.purge(agent_id)
    log.info(
        "deleted agent %r: %s memories, %s episodes, %s profiles, %s pending tasks",
        agent_id,
        removed.memories,
        removed.episodes,
        removed.profiles,
        removed.pending_tasks,
    )
    return _counts(agent_id, removed)


def forget_agent(engine: Host, agent_id: str) -> None:
    """Drop the agent's thresholds, gate and precision here and in the calibration sidecar."""
    try:
        engine.calibrator.forget_agent(agent_id)
    except Exception:  # the rows are gone already; a stale sidecar entry is only a default
        log.exception("could not drop the calibration of agent %r", agent_id)


def _counts(agent_id: str, rows: bulk.AgentRows) -> dict[str, Any]:
    return {
        "ok": True,
        "agent_id": agent_id,
        "deleted_memories": rows.memories,
        "deleted_profiles": rows.profiles,
        "deleted_episodes": rows.episodes,
        "deleted_pending_tasks": rows.pending_tasks,
    }
