"""Everyday memory writes: store, update_memory, archive_episode, locks and deletes."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from cpersona.config import Settings
from cpersona.credentials import tool_note
from cpersona.server.access import Access
from cpersona.server.registry import APPENDS, DELETES, EDITS, ToolSpec, arg
from cpersona.timerange import TimeRange, parse_range

if TYPE_CHECKING:
    from cpersona.engine import Engine

from cpersona.storage.error_kinds import StorageError

log = logging.getLogger("cpersona.tools")

STR = {"type": "string"}
#: store's `associations` (issue 32): declare_associations' object, said in one sentence.
STORE_ASSOCIATIONS = {
    "type": "object",
    "description": "Entities and relations to declare against this memory, as "
    "declare_associations takes them: {entities: [{name, aliases}], relations: [{subject, "
    "predicate, object}]}, subject / object being entity names or 'mem:<id>' / 'ep:<id>' "
    "refs. Malformed items are reported in the response's associations.dropped and "
    "skipped; the memory is stored regardless.",
}
SESSION_KEY = {
    "type": "string",
    "description": "Selects which persistence pause applies; never stored, never filters data.",
}
#: The time-scoped reads' arguments (issue 22; cpersona.timerange says what a row's time is).
SINCE = {
    "type": "string",
    "description": "Only rows whose time is at or after this ISO-8601 instant or date "
    "(any offset; none = UTC; a date = its 00:00 UTC).",
}
UNTIL = {
    "type": "string",
    "description": "Only rows whose time is before this ISO-8601 instant or date "
    "(exclusive; read as since is).",
}


class Ranged(Protocol):
    """An argument model with the time-scoped reads' `since` / `until` (None: not sent)."""

    @property
    def since(self) -> str | None: ...

    @property
    def until(self) -> str | None: ...


def span_of(a: Ranged) -> TimeRange | None:
    """The range a call's `since`/`until` name, None without either.

    Raises:
        RangeError: naming the argument that is no instant, or the reversed pair.
    """
    return parse_range(a.since, a.until)


@dataclass(frozen=True)
class StoreArgs:
    agent_id: str = arg({"type": "string", "description": "Owner of the memory."}, required=True)
    message: dict[str, Any] = arg(
        {
            "type": "object",
            "description": "The message: {id?, content, source?, timestamp?, metadata?}.",
            "properties": {
                "id": {"type": "string"},
                "content": {"type": "string"},
                "source": {"type": ["object", "string", "null"]},
                "timestamp": {"type": "string"},
                "metadata": {"type": "object"},
            },
        },
        required=True,
    )
    channel: str = arg(STR)
    project_id: str = arg(STR)
    session_key: str = arg(SESSION_KEY)
    #: issue 32: CPersona 2.6's rider (server/tools/associations.py).
    associations: dict[str, Any] = arg(STORE_ASSOCIATIONS)


@dataclass(frozen=True)
class ArchiveEpisodeArgs:
    agent_id: str = arg(STR, required=True)
    summary: str = arg(STR, required=True)
    history: list[dict[str, Any]] = arg({"type": "array", "items": {"type": "object"}})
    keywords: str = arg({"type": "string", "description": "Space-separated keywords."})
    resolved: bool = arg({"type": "boolean", "description": "Whether the topic concluded."})
    project_id: str = arg(STR)
    channel: str = arg(STR)
    session_key: str = arg(SESSION_KEY)


@dataclass(frozen=True)
class UpdateMemoryArgs:
    memory_id: int = arg({"type": "integer"}, required=True)
    content: str = arg(STR, required=True)
    agent_id: str = arg(STR)
    session_key: str = arg(SESSION_KEY)


@dataclass(frozen=True)
class MemoryRowArgs:
    """The tools that act on one memory: its id, the owner check, the pause key."""

    memory_id: int = arg({"type": "integer"}, required=True)
    agent_id: str = arg(STR)
    session_key: str = arg(SESSION_KEY)


@dataclass(frozen=True)
class EpisodeRowArgs:
    """delete_episode's row: as `MemoryRowArgs`, for an episode."""

    episode_id: int = arg({"type": "integer"}, required=True)
    agent_id: str = arg(STR)
    session_key: str = arg(SESSION_KEY)


def _store(engine: Engine, a: StoreArgs) -> dict[str, Any]:
    # surface.md §1.5: the OC gate, then the pause, then the tool's own validation.
    gate = engine.operating_context.gate(a.project_id, a.agent_id, write=True)
    if gate.refusal is not None:
        return {**gate.refused(), "result": "rejected", "reason": gate.refusal}
    skip = engine.pause.skip(
        "store", a.session_key, result="skipped", id="no-persist", embedded=False
    )
    if skip is not None:
        return {**skip, **gate.extra}
    out = engine.writer.store(a.agent_id, a.message, a.channel, gate.project_id)
    if a.associations and isinstance(out.get("id"), int) and out["id"] > 0:
        out["associations"] = _store_rider(engine, a, gate.project_id or "", out["id"])
    if out.get("result") == "stored":
        found = _supersede_candidates(engine, a, gate.project_id or "", out["id"])
        if found:
            out["supersede_candidates"] = found
    return {**out, **gate.extra}


def _supersede_candidates(engine: Engine, a: StoreArgs, project_id: str, row_id: int) -> list[Any]:
    """Issue 32's help to declare (never declared here). It reads after the memory committed:
    a read that fails then (the server gone right after the COMMIT) must not turn an
    acknowledged store into a refusal, so it answers without the key and logs why."""
    try:
        if not (a.associations or engine.recaller.supersession.active(a.agent_id)):
            return []
        from cpersona.retrieval.supersede_candidates import candidates

        msg_id = a.message.get("id")
        return candidates(
            engine.recaller,
            a.agent_id,
            project_id,
            a.channel,
            row_id,
            msg_id if isinstance(msg_id, str) else "",
        )
    except StorageError as exc:
        # The class only: the unreachable store already said why, once (its own log line).
        log.warning("supersede candidates of mem:%d not read (%s)", row_id, type(exc).__name__)
        return []


def _store_rider(engine: Engine, a: StoreArgs, project_id: str, row_id: int) -> dict[str, Any]:
    """The declaration a store carries, against the row it resolved to (a new row, or the one
    a duplicate echoed: the declaration is about that memory either way). It runs after the
    memory committed, in its own transaction, so its failure is reported here, never as the
    store's (2.6.14's rider)."""
    from cpersona.storage import associations as decl
    from cpersona.storage.error_kinds import StorageError

    scope = decl.DeclScope(a.agent_id, project_id, a.channel)
    try:
        out = decl.declare(engine.db, scope, a.associations, f"mem:{row_id}")
        engine.recaller.supersession.invalidate(a.agent_id)
        return out
    except StorageError as exc:
        log.warning("store: associations rider failed for mem:%s: %s", row_id, exc)
        return {
            "entities": [],
            "mentions": 0,
            "relations": [],
            "dropped": [{"item": "associations", "reason": f"declaration failed: {exc}"}],
        }


def unless_paused(
    engine: Engine, tool: str, session_key: str, write: Callable[[], dict[str, Any]], **skipped: Any
) -> dict[str, Any]:
    """The write's answer, or while the caller's bucket is paused the skip shape with
    `skipped` (the ids the write would have answered, as null)."""
    skip = engine.pause.skip(tool, session_key, **skipped)
    return write() if skip is None else skip


def _update_memory(engine: Engine, a: UpdateMemoryArgs) -> dict[str, Any]:
    def write() -> dict[str, Any]:
        return engine.writer.update_memory(a.memory_id, a.content, a.agent_id)

    return unless_paused(engine, "update_memory", a.session_key, write, updated_id=None)


def _delete_memory(engine: Engine, a: MemoryRowArgs) -> dict[str, Any]:
    def write() -> dict[str, Any]:
        return engine.writer.delete_memory(a.memory_id, a.agent_id)

    return unless_paused(engine, "delete_memory", a.session_key, write, deleted_id=None)


def _lock(engine: Engine, a: MemoryRowArgs) -> dict[str, Any]:
    def write() -> dict[str, Any]:
        return engine.writer.set_lock(a.memory_id, a.agent_id, True)

    return unless_paused(engine, "lock_memory", a.session_key, write, locked_id=None)


def _unlock(engine: Engine, a: MemoryRowArgs) -> dict[str, Any]:
    def write() -> dict[str, Any]:
        return engine.writer.set_lock(a.memory_id, a.agent_id, False)

    return unless_paused(engine, "unlock_memory", a.session_key, write, unlocked_id=None)


def _archive_episode(engine: Engine, a: ArchiveEpisodeArgs) -> dict[str, Any]:
    gate = engine.operating_context.gate(a.project_id, a.agent_id, write=True)
    if gate.refusal is not None:
        return gate.refused(episode_id=None)
    skip = engine.pause.skip(
        "archive_episode",
        a.session_key,
        episode_id=None,
        id="no-persist",
        queued=False,
        task_id=None,
    )
    if skip is not None:
        return {**skip, **gate.extra}
    out = engine.writer.archive_episode(
        a.agent_id,
        a.summary,
        a.history,
        a.keywords,
        a.resolved,
        gate.project_id,
        a.channel,
    )
    return {**out, **gate.extra}


def _delete_episode(engine: Engine, a: EpisodeRowArgs) -> dict[str, Any]:
    def write() -> dict[str, Any]:
        return engine.writer.delete_episode(a.episode_id, a.agent_id)

    return unless_paused(engine, "delete_episode", a.session_key, write, deleted_id=None)


def _store_failure(error: str) -> dict[str, Any]:
    return {"ok": False, "result": "rejected", "reason": error}


def _archive_failure(error: str) -> dict[str, Any]:
    return {"ok": False, "episode_id": None, "error": error}


def _store_description(settings: Settings) -> str:
    cap = settings.max_content_length
    meta_cap = settings.max_metadata_length
    return (
        "Remember one message for an agent. Answers `result`: `stored` (a new row; `id`, "
        "`embedded`), `skipped` (a duplicate: the existing row's `id` is echoed; or "
        "persistence is paused: `persisted: false`) or `rejected` (with `reason`). "
        "Never updates an existing row: there is no upsert. A `message.id` already "
        "stored for this agent and project is skipped whatever the channel; identical "
        "content is skipped within agent, project and channel. Re-sending unchanged "
        "content is a safe no-op; to change a memory use update_memory. Content is "
        f"trimmed and cut to {cap} characters (`truncated: true`); `source` and "
        f"`metadata` over {meta_cap} serialised characters are rejected. `project_id` "
        "'' is the global pool; `channel` '' is channel-global. Timestamps: ISO-8601, "
        "offset-less means UTC; default is now." + tool_note(settings.secrets)
    )


def _archive_description(settings: Settings) -> str:
    return (
        "Store a session summary you computed (an episode); the server never "
        "summarises. Every call appends a new episode (not idempotent). Only each "
        "history item's `timestamp` is read, to set the episode's start and end. "
        f"Summary and keywords are trimmed and cut to {settings.max_content_length} characters. "
        "Archiving moves the episode boundary that recall uses to age older memories."
        + tool_note(settings.secrets)
    )


def _update_description(settings: Settings) -> str:
    return (
        "Replace a memory's content (the only way to change stored text); it is "
        "re-embedded. Locked memories refuse. With `agent_id`, only that agent's row "
        f"can change. Content is trimmed and cut to {settings.max_content_length} characters."
        + tool_note(settings.secrets)
    )


_ABOUT_LOCK_MEMORY = (
    "Protect a memory from update_memory, delete_memory and maintenance repairs. "
    "A lock never changes ranking, and does not survive delete_agent_data or a "
    "merge move."
)
_ABOUT_UNLOCK_MEMORY = "Remove the protection lock_memory set; unlocking an unlocked row succeeds."
_ABOUT_DELETE_MEMORY = (
    "Delete one memory. A locked memory refuses. With `agent_id`, only that agent's "
    "row can be deleted; without it the call is unscoped (logged)."
)
_ABOUT_DELETE_EPISODE = "Delete one episode (episodes have no lock)."

#: Each tool here writes the rows of the agent its `agent_id` names.
_WRITE = Access.write()

# Each: name, position, description, arguments, access, handler, hints (ToolSpec's fields).
TOOLS = (
    ToolSpec(
        "store", 5, _store_description, StoreArgs, _WRITE, _store, EDITS, failure=_store_failure
    ),
    ToolSpec(
        "archive_episode",
        11,
        _archive_description,
        ArchiveEpisodeArgs,
        _WRITE,
        _archive_episode,
        APPENDS,
        failure=_archive_failure,
    ),
    ToolSpec(
        "update_memory", 20, _update_description, UpdateMemoryArgs, _WRITE, _update_memory, EDITS
    ),
    ToolSpec("lock_memory", 21, _ABOUT_LOCK_MEMORY, MemoryRowArgs, _WRITE, _lock, EDITS),
    ToolSpec("unlock_memory", 22, _ABOUT_UNLOCK_MEMORY, MemoryRowArgs, _WRITE, _unlock, EDITS),
    ToolSpec(
        "delete_memory", 18, _ABOUT_DELETE_MEMORY, MemoryRowArgs, _WRITE, _delete_memory, DELETES
    ),
    ToolSpec(
        "delete_episode",
        19,
        _ABOUT_DELETE_EPISODE,
        EpisodeRowArgs,
        _WRITE,
        _delete_episode,
        DELETES,
    ),
)
