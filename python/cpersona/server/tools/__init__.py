"""One module per tool group; `all_tools` lists them in CPersona 2.5.x's registration order."""

from __future__ import annotations

from cpersona.config import Settings
from cpersona.server.registry import ToolSpec
from cpersona.server.tools import (
    admin,
    browse,
    health,
    memory,
    portability,
    quality,
    recall,
    session,
)

#: tools/list order of CPersona 2.5.12 (surface.md §2, the # column).
REGISTRATION_ORDER = (
    "pause_persistence",
    "resume_persistence",
    "persistence_status",
    "get_operating_context",
    "store",
    "recall",
    "recall_with_context",
    "get_contents",
    "get_profile",
    "update_profile",
    "archive_episode",
    "list_memories",
    "list_episodes",
    "delete_agent_data",
    "calibrate_threshold",
    "set_recall_precision",
    "get_recall_precision",
    "delete_memory",
    "delete_episode",
    "update_memory",
    "lock_memory",
    "unlock_memory",
    "get_queue_status",
    "export_memories",
    "import_memories",
    "merge_memories",
    "check_health",
    "get_session_findings",
    "deep_check",
    "migrate_channel_axis",
    "check_update",
)


def all_tools(settings: Settings) -> list[ToolSpec]:
    specs = [
        *memory.tools(settings),
        *browse.tools(settings),
        *recall.tools(settings),
        *quality.tools(settings),
        *portability.tools(settings),
        *session.tools(settings),
        *admin.tools(settings),
        *health.tools(settings),
    ]
    rank = {name: i for i, name in enumerate(REGISTRATION_ORDER)}
    return sorted(specs, key=lambda spec: rank.get(spec.name, len(rank)))
