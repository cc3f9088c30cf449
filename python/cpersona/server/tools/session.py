"""Session controls: pause_persistence, resume_persistence, persistence_status (surface.md §10)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cpersona.server.access import READ_WRITE, Access
from cpersona.server.registry import EDITS, READS, ToolSpec, arg
from cpersona.server.tools.memory import SESSION_KEY
from cpersona.session import DEFAULT_TTL, MAX_LIVE, MAX_TTL

if TYPE_CHECKING:
    from cpersona.engine import Engine

_AFFECTED = (
    "store, archive_episode, update_memory, delete_memory, delete_episode, delete_agent_data, "
    "lock_memory, unlock_memory, update_profile, import_memories and merge_memories (unless "
    "dry_run), calibrate_threshold and set_recall_precision"
)


@dataclass(frozen=True)
class PauseArgs:
    ttl_seconds: int = arg(
        {
            "type": "integer",
            "minimum": 1,
            "maximum": MAX_TTL,
            "default": DEFAULT_TTL,
            "description": "Seconds until writes resume by themselves.",
        },
        DEFAULT_TTL,
    )
    session_key: str = arg(SESSION_KEY)


@dataclass(frozen=True)
class SessionArgs:
    """resume_persistence and persistence_status: the caller's pause key only."""

    session_key: str = arg(SESSION_KEY)


def _pause(engine: Engine, a: PauseArgs) -> dict[str, Any]:
    result: dict[str, Any] = engine.pause.pause(a.session_key, a.ttl_seconds)
    return result


def _resume(engine: Engine, a: SessionArgs) -> dict[str, Any]:
    result: dict[str, Any] = engine.pause.resume(a.session_key)
    return result


def _status(engine: Engine, a: SessionArgs) -> dict[str, Any]:
    result: dict[str, Any] = engine.pause.status(a.session_key)
    return result


_ABOUT_PAUSE_PERSISTENCE = (
    "Stop writing for a while (no-persist mode): until `ttl_seconds` elapse "
    f"(default {DEFAULT_TTL}, 1 to {MAX_TTL}) or resume_persistence, these tools "
    f"write nothing: {_AFFECTED}. They answer their success shape with "
    "`persisted: false`, `dry_run: true` and a `reason`; branch on `persisted`. "
    "check_health and deep_check run with fix forced off; recall does not count "
    "recalls. Reads and export are unaffected. The pause belongs to your "
    "`session_key` (`scope: session`); callers without a key share one pause "
    "(`scope: process`). Pausing again replaces the deadline. It lives in this "
    f"server process only (a restart clears it); at most {MAX_LIVE} live pauses."
)
_ABOUT_RESUME_PERSISTENCE = (
    "End the no-persist pause of your `session_key` (or of the shared keyless "
    "pause): writes persist again at once. `was_active` says whether a pause was "
    "in force."
)
_ABOUT_PERSISTENCE_STATUS = (
    "Whether writes are paused for your `session_key`: `paused`, `expires_at` "
    "(UTC) and `ttl_remaining_seconds` (whole seconds; both null when not "
    "paused), and `scope` (`session` for a declared key, `process` for the "
    "shared keyless pause)."
)

# Each: name, position, description, arguments, access, handler, hints (ToolSpec's fields).
TOOLS = (
    ToolSpec(
        "pause_persistence",
        1,
        _ABOUT_PAUSE_PERSISTENCE,
        PauseArgs,
        Access.every_agent(READ_WRITE),
        _pause,
        EDITS,
    ),
    ToolSpec(
        "resume_persistence",
        2,
        _ABOUT_RESUME_PERSISTENCE,
        SessionArgs,
        Access.every_agent(READ_WRITE),
        _resume,
        EDITS,
    ),
    ToolSpec(
        "persistence_status",
        3,
        _ABOUT_PERSISTENCE_STATUS,
        SessionArgs,
        Access.anyone(),
        _status,
        READS,
    ),
)
