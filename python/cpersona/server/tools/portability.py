"""Portability and bulk deletion: export_memories, import_memories, merge_memories,
migrate_channel_axis, delete_agent_data (surface.md §4.9, §8)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cpersona import portability
from cpersona.config import Settings
from cpersona.credentials import tool_note
from cpersona.portability.import_ import failure_shape as import_failure
from cpersona.server.access import Access
from cpersona.server.registry import DELETES, MAY_WRITE, Annotations, ToolSpec, arg, keeping
from cpersona.server.tools.memory import SESSION_KEY, SINCE, STR, UNTIL, span_of
from cpersona.session import marked
from cpersona.timerange import RangeError

if TYPE_CHECKING:
    from cpersona.engine import Engine

#: Why a paused migrate_channel_axis answered a dry run although a real one was asked for.
MIGRATE_SKIP_REASON = "no-persist mode active — dry_run forced"


@dataclass(frozen=True)
class DeleteAgentArgs:
    agent_id: str = arg(
        {"type": "string", "description": "The agent to delete (not '')."}, required=True
    )
    session_key: str = arg(SESSION_KEY)


@dataclass(frozen=True)
class ExportArgs:
    agent_id: str = arg({"type": "string", "description": "'' = every agent."}, required=True)
    output_path: str = arg({"type": "string", "description": "File to write."}, required=True)
    include_embeddings: bool = arg(
        {
            "type": "boolean",
            "default": False,
            "description": "Also write each row's vector (base64 float32).",
        }
    )
    since: str | None = arg(SINCE, None)
    until: str | None = arg(UNTIL, None)


@dataclass(frozen=True)
class ImportArgs:
    input_path: str = arg({"type": "string", "description": "JSONL file to read."}, required=True)
    target_agent_id: str = arg(
        {
            "type": "string",
            "description": "Write every record under this agent; '' = each record's own.",
        }
    )
    dry_run: bool = arg({"type": "boolean", "default": False})
    session_key: str = arg(SESSION_KEY)


@dataclass(frozen=True)
class MergeArgs:
    source_agent_id: str = arg(STR, required=True)
    target_agent_id: str = arg(STR, required=True)
    strategy: str = arg({"type": "string", "default": "skip", "description": "'skip'."}, "skip")
    mode: str = arg(
        {"type": "string", "default": "copy", "description": "'copy' or 'move'."}, "copy"
    )
    dry_run: bool = arg({"type": "boolean", "default": False})
    session_key: str = arg(SESSION_KEY)


@dataclass(frozen=True)
class MigrateArgs:
    agent_id: str = arg({"type": "string", "description": "'' = every agent."})
    dry_run: bool = arg({"type": "boolean", "default": True}, True)
    globalize_unrecoverable: bool = arg({"type": "boolean", "default": False})
    session_key: str = arg(SESSION_KEY)


def _moves(args: Mapping[str, Any]) -> bool:
    """A merge that deletes from its source: any mode but copy (copy is the default)."""
    mode = args.get("mode")
    return isinstance(mode, str) and mode.strip().lower() != "copy"


def _pause_state(engine: Engine, session_key: str) -> str | None:
    """The pause state (`12m left`) of the caller's session bucket, or None when not paused."""
    state: str | None = engine.pause.active(session_key)
    return state


def _export(engine: Engine, a: ExportArgs) -> dict[str, Any]:
    try:
        span = span_of(a)
    except RangeError as exc:
        return {"ok": False, "error": str(exc)}
    # Not gated by the pause: it writes a file, not rows (surface.md §8.1).
    return portability.export_memories(
        engine, a.agent_id, a.output_path, a.include_embeddings, span=span
    )


def _import(engine: Engine, a: ImportArgs) -> dict[str, Any]:
    # The services check their arguments first and take `paused` as their branch point; a
    # dry run is never paused (it writes nothing). The markers are the pause's (§10.3).
    state = None if a.dry_run else _pause_state(engine, a.session_key)
    out = portability.import_memories(
        engine, a.input_path, a.target_agent_id, a.dry_run, paused=state is not None
    )
    return marked("import_memories", state, out) if state and out.get("ok") else out


def _merge(engine: Engine, a: MergeArgs) -> dict[str, Any]:
    state = None if a.dry_run else _pause_state(engine, a.session_key)
    out = portability.merge_memories(
        engine,
        a.source_agent_id,
        a.target_agent_id,
        a.strategy,
        a.mode,
        a.dry_run,
        paused=state is not None,
    )
    return marked("merge_memories", state, out) if state and out.get("ok") else out


def _migrate(engine: Engine, a: MigrateArgs) -> dict[str, Any]:
    state = _pause_state(engine, a.session_key)
    out = portability.migrate_channel_axis(
        engine,
        a.agent_id,
        a.dry_run,
        a.globalize_unrecoverable,
        paused=state is not None,
    )
    if state is not None and not a.dry_run:  # no `persisted` key here (§10.3)
        out["repairs_skipped"] = True
        out["repairs_skip_reason"] = MIGRATE_SKIP_REASON
    return out


def _delete_agent(engine: Engine, a: DeleteAgentArgs) -> dict[str, Any]:
    state = _pause_state(engine, a.session_key)
    out = portability.delete_agent_data(engine, a.agent_id, paused=state is not None)
    return marked("delete_agent_data", state, out) if state and out.get("ok") else out


# Refusals keep the documented tally keys present (surface.md §1.3).
_MERGE_FAILURE = keeping(
    merged_memories=0,
    skipped_memories=0,
    merged_episodes=0,
    skipped_episodes=0,
    profile_copied=False,
    skipped_profile=False,
)
_DELETE_FAILURE = keeping(
    deleted_memories=0, deleted_profiles=0, deleted_episodes=0, deleted_pending_tasks=0
)


def _confinement(settings: Settings) -> str:
    if settings.export_dir:
        return (
            "Paths are confined to the server's export directory (CPERSONA_EXPORT_DIR): a "
            "relative path is taken inside it, symlinks are resolved, and a path that lands "
            "outside it or contains '..' is refused."
        )
    return (
        "No export directory is configured (CPERSONA_EXPORT_DIR), so any path the server "
        "process can reach is accepted, except one containing '..'."
    )


def _export_description(settings: Settings) -> str:
    return (
        "Write a JSONL backup (format cpersona-export/1.0: a header line with counts, "
        "then memories, episodes and profiles, one JSON object per line) of one agent, "
        "or of every agent when `agent_id` is ''. Every field is kept (project, "
        "channel, source, metadata, timestamps, lock flag, recall stats); "
        "`include_embeddings` also writes each stored vector as `embedding_b64`. The "
        "file is written from one consistent snapshot to a temporary file and renamed "
        "over `output_path` (owner-only, 0600), so a failed export never leaves a "
        "partial file or destroys an earlier one; a missing parent directory is "
        f"created. {_confinement(settings)} Not affected by a persistence pause (it writes a "
        "file, not memories). Read it back with import_memories."
    )


def _import_description(settings: Settings) -> str:
    return (
        "Read a JSONL export (from export_memories, or CPersona 2.5.x) back into this "
        "database. Idempotent: a memory is skipped when its agent already has the same "
        "msg_id in the same project, or the same content in the same project and "
        "channel; an episode is skipped when the same summary exists in its project "
        "and channel; so importing a file twice changes nothing. An imported profile "
        "overwrites the agent's existing one. Content is sanitised and capped as store "
        "does. `target_agent_id` puts every record under that agent ('' keeps each "
        "record's own). `dry_run` counts what would happen without writing. The whole "
        "import is one transaction: a failure, or a header whose counts disagree with "
        "the body (a truncated file), writes nothing. Rows without a usable vector in "
        "the file are embedded by this server; if embedding is unavailable they are "
        "stored without one and counted in `missing_embeddings` (check_health with "
        f"fix=true embeds them later). Files over {settings.max_import_bytes} bytes are "
        f"refused. {_confinement(settings)} Per-line problems are listed in `errors`."
        + tool_note(settings.secrets)
    )


_ABOUT_DELETE_AGENT_DATA = (
    "Delete everything belonging to one agent: all its memories (locked ones too: "
    "a lock does not protect against this), episodes, profile and pending tasks, "
    "in every project and channel, in one transaction. Its calibrated recall "
    "thresholds are dropped as well. Other agents are untouched. `agent_id` must "
    "be non-empty. Answers the number of rows deleted of each kind. Irreversible: "
    "export_memories first if the data may be needed again."
)
_IMPORT_MEMORIES_ACCESS = Access.write("target_agent_id", files=True)
_ABOUT_MERGE_MEMORIES = (
    "Copy (`mode` 'copy', the default) or move ('move') one agent's memories, "
    "episodes and profile into another agent: an export and import without a file, "
    "atomic (one transaction: on any failure neither agent changes). Rows are "
    "copied verbatim with their project, channel, timestamps, vectors, lock flag "
    "and recall stats. Duplicates are skipped and the target's version kept "
    "(`strategy` 'skip', the only one): a memory with the same msg_id in the same "
    "project or the same content in the same project and channel, an episode with "
    "the same summary in the same project and channel, or a profile when the "
    "target already has one. A move deletes from the source exactly the rows it "
    "copied, locked ones included (a lock does not stop a move); skipped rows stay "
    "and are counted in `left_at_source`. `dry_run` counts without writing."
)
_MERGE_MEMORIES_ACCESS = Access.read("source_agent_id", writes_when=_moves) + Access.write(
    "target_agent_id"
)
_ABOUT_MIGRATE_CHANNEL_AXIS = (
    "One-time repair for memories filed under the literal channel 'discord' by old "
    "Discord bridges: where a row's metadata.session_id starts with a numeric "
    "channel id ('<channel>:...'), that id becomes its channel. Dry run by default "
    "(`dry_run` true): reports the recoverable rows per channel, the unrecoverable "
    "ones and rows with invalid metadata, with samples. Non-destructive (only the "
    "channel changes; a row that would duplicate another stays) and idempotent. "
    "`globalize_unrecoverable` also moves the unrecoverable rows to channel '' "
    "(visible from every channel). `agent_id` '' covers every agent. A persistence "
    "pause forces the dry run."
)

# Each: name, position, description, arguments, access, handler, hints (ToolSpec's fields).
TOOLS = (
    ToolSpec(
        "delete_agent_data",
        14,
        _ABOUT_DELETE_AGENT_DATA,
        DeleteAgentArgs,
        Access.write(),
        _delete_agent,
        DELETES,
        failure=_DELETE_FAILURE,
    ),
    ToolSpec(
        "export_memories",
        24,
        _export_description,
        ExportArgs,
        Access.write(sweeping=True, files=True),
        _export,
        Annotations(read_only=False, destructive=True),
    ),
    ToolSpec(
        "import_memories",
        25,
        _import_description,
        ImportArgs,
        _IMPORT_MEMORIES_ACCESS,
        _import,
        DELETES,
        failure=import_failure,
    ),
    ToolSpec(
        "merge_memories",
        26,
        _ABOUT_MERGE_MEMORIES,
        MergeArgs,
        _MERGE_MEMORIES_ACCESS,
        _merge,
        DELETES,
        failure=_MERGE_FAILURE,
    ),
    ToolSpec(
        "migrate_channel_axis",
        30,
        _ABOUT_MIGRATE_CHANNEL_AXIS,
        MigrateArgs,
        Access.write(sweeping=True),
        _migrate,
        MAY_WRITE,
    ),
)
