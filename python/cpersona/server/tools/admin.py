"""Operator-facing tools: get_operating_context, get_queue_status, check_update."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cpersona.config import Settings
from cpersona.server.access import Access, flag
from cpersona.server.registry import MAY_WRITE, READS, NoArguments, ToolSpec, arg

if TYPE_CHECKING:
    from cpersona.engine import Engine


@dataclass(frozen=True)
class OperatingContextArgs:
    section: str = arg({"type": "string", "description": "A doctrine section name; '' = preview."})


@dataclass(frozen=True)
class CheckUpdateArgs:
    refresh: bool = arg({"type": "boolean", "description": "Look the release index up now."})
    apply: bool = arg({"type": "boolean", "description": "Install the newer release."})


def _operating_context(engine: Engine, a: OperatingContextArgs) -> dict[str, Any]:
    result: dict[str, Any] = engine.operating_context.describe(a.section)
    return result


def _queue_status(engine: Engine, a: NoArguments) -> dict[str, Any]:
    result: dict[str, Any] = engine.tasks.status()
    return result


def _check_update(engine: Engine, a: CheckUpdateArgs) -> dict[str, Any]:
    result: dict[str, Any] = engine.updates.report(a.refresh, a.apply)
    return result


def _check_update_description(settings: Settings) -> str:
    checks = "on" if settings.update_check else "off"
    return (
        "Report this server's version (`running`) and, only when the operator enabled "
        f"release checks (CPERSONA_UPDATE_CHECK=true; now {checks}), whether a newer "
        "release exists: `state` is disabled, ok, newer, yanked, unlisted or unknown. "
        "`refresh=true` looks the index up now. Nothing is ever installed by itself; "
        "`apply=true` runs the shown install command only while checks are enabled "
        "and a newer release is known, and the server must be restarted afterwards."
    )


_ABOUT_GET_OPERATING_CONTEXT = (
    "Read the operator's operating context (a TOML file the operator edits on "
    "disk; re-read when it changes). Without `section`: the revision, the "
    "instructions summary, the project registry and its enforcement, the agent -> "
    "default project map used by project_id '@auto', and the doctrine section "
    "names. With `section`: that doctrine section's body. `ok: false, enabled: "
    "false` while no usable file exists."
)
_ABOUT_GET_QUEUE_STATUS = (
    "The legacy pending-task queue: `enabled`, `pending` rows, `max_retries`, "
    "`retry_delay` (seconds). Nothing enqueues any more; the server only drains "
    "rows an older version left behind, so `pending: 0` is normal. While the queue "
    "is disabled `pending` reads 0."
)
#: Reading the version is a read of the whole server; installing changes it for all.
_CHECK_UPDATE_ACCESS = Access.every_agent(writes_when=flag("apply"))

# Each: name, position, description, arguments, access, handler, hints (ToolSpec's fields).
TOOLS = (
    ToolSpec(
        "get_operating_context",
        4,
        _ABOUT_GET_OPERATING_CONTEXT,
        OperatingContextArgs,
        Access.anyone(),
        _operating_context,
        READS,
    ),
    ToolSpec(
        "get_queue_status",
        23,
        _ABOUT_GET_QUEUE_STATUS,
        NoArguments,
        Access.anyone(),
        _queue_status,
        READS,
    ),
    ToolSpec(
        "check_update",
        31,
        _check_update_description,
        CheckUpdateArgs,
        _CHECK_UPDATE_ACCESS,
        _check_update,
        MAY_WRITE,
    ),
)
