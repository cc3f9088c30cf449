"""Browsing and profiles: list_memories, list_episodes, get_profile, update_profile."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cpersona.config import Settings
from cpersona.credentials import tool_note
from cpersona.memory import listing
from cpersona.models import ProjectFilter
from cpersona.server.access import Access
from cpersona.server.registry import READS, Annotations, ToolSpec, arg, keeping
from cpersona.server.tools.memory import SESSION_KEY, SINCE, STR, UNTIL, span_of, unless_paused
from cpersona.timerange import RangeError

if TYPE_CHECKING:
    from cpersona.engine import Engine
    from cpersona.storage import Store
    from cpersona.timerange import TimeRange

#: memory/listing.py's list_memories or list_episodes.
Lister = Callable[["Store", Settings, str, ProjectFilter, int, "TimeRange | None"], dict[str, Any]]


@dataclass(frozen=True)
class AgentArgs:
    """The tools that read one agent's own row: its id only."""

    agent_id: str = arg(STR, required=True)


@dataclass(frozen=True)
class UpdateProfileArgs:
    agent_id: str = arg(STR, required=True)
    profile: str = arg(STR, required=True)
    session_key: str = arg(SESSION_KEY)


@dataclass(frozen=True)
class ListMemoriesArgs:
    agent_id: str = arg(STR)
    limit: int = arg({"type": "integer"}, 100)
    #: None (omitted) lists every project, unlike '' (the global pool).
    project_id: str | None = arg(STR, None)
    since: str | None = arg(SINCE, None)
    until: str | None = arg(UNTIL, None)


@dataclass(frozen=True)
class ListEpisodesArgs(ListMemoriesArgs):
    """list_episodes: as `ListMemoriesArgs`, with a smaller default page (an overridden field
    keeps its place, so the published order is the same)."""

    limit: int = arg({"type": "integer"}, 50)


def _list_memories(engine: Engine, a: ListMemoriesArgs) -> dict[str, Any]:
    return _listed(engine, a, listing.list_memories, _MEMORIES_FAILURE)


def _list_episodes(engine: Engine, a: ListEpisodesArgs) -> dict[str, Any]:
    return _listed(engine, a, listing.list_episodes, _EPISODES_FAILURE)


def _listed(
    engine: Engine,
    a: ListMemoriesArgs,
    lister: Lister,
    failure: Callable[[str], dict[str, Any]],
) -> dict[str, Any]:
    try:
        span = span_of(a)
    except RangeError as exc:
        return failure(str(exc))
    # Reads never refuse at the OC gate (surface.md §6.6); they only resolve and warn.
    gate = engine.operating_context.gate(a.project_id, a.agent_id, write=False)
    project = ProjectFilter(gate.project_id)
    out = lister(engine.db, engine.settings, a.agent_id, project, a.limit, span)
    return {**out, **gate.extra}


def _get_profile(engine: Engine, a: AgentArgs) -> dict[str, Any]:
    return listing.get_profile(engine.db, a.agent_id)


def _update_profile(engine: Engine, a: UpdateProfileArgs) -> dict[str, Any]:
    def write() -> dict[str, Any]:
        return engine.writer.update_profile(a.agent_id, a.profile)

    return unless_paused(engine, "update_profile", a.session_key, write, profiles_updated=0)


# Refusals keep the documented collection keys present (surface.md §1.3).
def _profile_failure(error: str) -> dict[str, Any]:
    return {"ok": False, "profiles_updated": 0, "reason": error, "error": error}


_MEMORIES_FAILURE = keeping(memories=[], count=0)
_EPISODES_FAILURE = keeping(episodes=[], count=0)


def _update_profile_description(settings: Settings) -> str:
    return (
        "Replace (never append to) the agent's one profile with text you computed. "
        f"Cut to {settings.max_profile_length} characters (`truncated: true`). The "
        "profile is injected into recall as an unscored row only when the recall's "
        "scope holds at least 50 rows." + tool_note(settings.secrets)
    )


def _list_memories_description(settings: Settings) -> str:
    return (
        "List memories newest first, without scoring. `agent_id` '' lists all agents. "
        f"`limit` default 100, at most {listing.MEMORY_LIST_MAX}. `project_id`: omitted "
        "= all projects, '' = global pool only, X = X plus the global pool. After "
        f"{listing.MEMORY_LIST_BUDGET} content characters, longer rows are cut to "
        f"{settings.recall_preview_chars} characters with `content_truncated`, `content_len` "
        "and a `ref` to expand with get_contents. A successful read carries no `ok` key."
    )


def _list_episodes_description(settings: Settings) -> str:
    return (
        "List episodes newest first. `agent_id` '' lists all agents. `limit` default "
        f"50, at most {listing.EPISODE_LIST_MAX}. `project_id` as in list_memories. "
        f"After {listing.EPISODE_LIST_BUDGET} characters of summary and keywords, longer "
        f"fields are cut to {settings.recall_preview_chars} characters with a `ref`. A "
        "successful read carries no `ok` key."
    )


_ABOUT_GET_PROFILE = (
    "Read the agent's single profile text (`{profile}`; '' when none). A successful "
    "read carries no `ok` key."
)

# Each: name, position, description, arguments, access, handler, hints (ToolSpec's fields).
TOOLS = (
    ToolSpec("get_profile", 9, _ABOUT_GET_PROFILE, AgentArgs, Access.read(), _get_profile, READS),
    ToolSpec(
        "update_profile",
        10,
        _update_profile_description,
        UpdateProfileArgs,
        Access.write(),
        _update_profile,
        Annotations(read_only=False, destructive=False),
        failure=_profile_failure,
    ),
    ToolSpec(
        "list_memories",
        12,
        _list_memories_description,
        ListMemoriesArgs,
        Access.read(sweeping=True),
        _list_memories,
        READS,
        failure=_MEMORIES_FAILURE,
    ),
    ToolSpec(
        "list_episodes",
        13,
        _list_episodes_description,
        ListEpisodesArgs,
        Access.read(sweeping=True),
        _list_episodes,
        READS,
        failure=_EPISODES_FAILURE,
    ),
)
