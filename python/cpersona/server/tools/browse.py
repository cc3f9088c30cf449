"""Browsing and profiles: list_memories, list_episodes, get_profile, update_profile."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from cpersona.config import Settings
from cpersona.credentials import tool_note
from cpersona.memory import listing
from cpersona.models import ProjectFilter
from cpersona.server.registry import Annotations, ToolSpec
from cpersona.server.tools.memory import (
    RANGE_DEFAULTS,
    SESSION_KEY,
    SINCE,
    STR,
    UNTIL,
    span_of,
)
from cpersona.timerange import RangeError

if TYPE_CHECKING:
    from cpersona.engine import Engine


def _list_memories(engine: Engine, a: dict[str, Any]) -> dict[str, Any]:
    try:
        span = span_of(a)
    except RangeError as exc:
        return _memories_failure(str(exc))
    # Reads never refuse at the OC gate (surface.md §6.6); they only resolve and warn.
    gate = engine.operating_context.gate(a["project_id"], a["agent_id"], write=False)
    project = ProjectFilter(gate.project_id)
    out = listing.list_memories(
        engine.db, engine.settings, a["agent_id"], project, a["limit"], span
    )
    return {**out, **gate.extra}


def _list_episodes(engine: Engine, a: dict[str, Any]) -> dict[str, Any]:
    try:
        span = span_of(a)
    except RangeError as exc:
        return _episodes_failure(str(exc))
    gate = engine.operating_context.gate(a["project_id"], a["agent_id"], write=False)
    project = ProjectFilter(gate.project_id)
    out = listing.list_episodes(
        engine.db, engine.settings, a["agent_id"], project, a["limit"], span
    )
    return {**out, **gate.extra}


def _get_profile(engine: Engine, a: dict[str, Any]) -> dict[str, Any]:
    return listing.get_profile(engine.db, a["agent_id"])


def _update_profile(engine: Engine, a: dict[str, Any]) -> dict[str, Any]:
    skip = engine.pause.skip("update_profile", a["session_key"], profiles_updated=0)
    if skip is not None:
        return skip
    return engine.writer.update_profile(a["agent_id"], a["profile"])


# Refusals keep the documented collection keys present (surface.md §1.3).
def _profile_failure(error: str) -> dict[str, Any]:
    return {"ok": False, "profiles_updated": 0, "reason": error, "error": error}


def _memories_failure(error: str) -> dict[str, Any]:
    return {"ok": False, "error": error, "memories": [], "count": 0}


def _episodes_failure(error: str) -> dict[str, Any]:
    return {"ok": False, "error": error, "episodes": [], "count": 0}


def tools(settings: Settings) -> list[ToolSpec]:
    preview = settings.recall_preview_chars
    return [
        ToolSpec(
            name="get_profile",
            description=(
                "Read the agent's single profile text (`{profile}`; '' when none). A successful "
                "read carries no `ok` key."
            ),
            properties={"agent_id": STR},
            required=("agent_id",),
            handler=_get_profile,
            annotations=Annotations(read_only=True),
        ),
        ToolSpec(
            name="update_profile",
            description=(
                "Replace (never append to) the agent's one profile with text you computed. "
                f"Cut to {settings.max_profile_length} characters (`truncated: true`). The "
                "profile is injected into recall as an unscored row only when the recall's "
                "scope holds at least 50 rows." + tool_note(settings.secrets)
            ),
            properties={"agent_id": STR, "profile": STR, "session_key": SESSION_KEY},
            required=("agent_id", "profile"),
            handler=_update_profile,
            annotations=Annotations(read_only=False, destructive=False),
            failure=_profile_failure,
        ),
        ToolSpec(
            name="list_memories",
            description=(
                "List memories newest first, without scoring. `agent_id` '' lists all agents. "
                f"`limit` default 100, at most {listing.MEMORY_LIST_MAX}. `project_id`: omitted "
                "= all projects, '' = global pool only, X = X plus the global pool. After "
                f"{listing.MEMORY_LIST_BUDGET} content characters, longer rows are cut to "
                f"{preview} characters with `content_truncated`, `content_len` and a `ref` to "
                "expand with get_contents. A successful read carries no `ok` key."
            ),
            properties={
                "agent_id": STR,
                "limit": {"type": "integer"},
                "project_id": STR,
                "since": SINCE,
                "until": UNTIL,
            },
            required=(),
            handler=_list_memories,
            annotations=Annotations(read_only=True),
            defaults={"limit": 100, "project_id": None, **RANGE_DEFAULTS},
            failure=_memories_failure,
        ),
        ToolSpec(
            name="list_episodes",
            description=(
                "List episodes newest first. `agent_id` '' lists all agents. `limit` default "
                f"50, at most {listing.EPISODE_LIST_MAX}. `project_id` as in list_memories. "
                f"After {listing.EPISODE_LIST_BUDGET} characters of summary and keywords, longer "
                f"fields are cut to {preview} characters with a `ref`. A successful read carries "
                "no `ok` key."
            ),
            properties={
                "agent_id": STR,
                "limit": {"type": "integer"},
                "project_id": STR,
                "since": SINCE,
                "until": UNTIL,
            },
            required=(),
            handler=_list_episodes,
            annotations=Annotations(read_only=True),
            defaults={"limit": 50, "project_id": None, **RANGE_DEFAULTS},
            failure=_episodes_failure,
        ),
    ]
