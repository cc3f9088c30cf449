"""`merge_memories`: copy or move one agent's rows into another (surface.md §8.3).

An export→import without a file, in one transaction: either every row the merge decides to
copy lands in the target (and, for a move, leaves the source) or, on any failure, neither agent
changes. Rows are copied verbatim (content is not re-sanitised; source, metadata, timestamps,
embedding, lock flag and recall stats come along). Duplicates are skipped and the target's
version kept: a memory whose (project, msg_id) or (project, channel, content) the target
already holds, an episode whose (project, channel, summary) it holds, a profile of a user_id it
has. A lock does not stop a move (surface.md §15 row 9): a copied locked row leaves the source
and arrives locked. A move deletes exactly the rows it copied; skipped rows stay and are
reported in `left_at_source`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from cpersona.portability.agents import forget_agent
from cpersona.portability.counts import Copied
from cpersona.storage import bulk
from cpersona.vectors.remote import Item, RemoteVectors

if TYPE_CHECKING:
    from cpersona.portability.host import Host

log = logging.getLogger("cpersona.portability")

STRATEGIES = ("skip",)
MODES = ("copy", "move")


@dataclass(slots=True)
class _Tally(Copied):
    profile_copied: bool = False
    skipped_profile: bool = False
    copied: dict[str, list[int]] = field(
        default_factory=lambda: {"memories": [], "episodes": [], "profiles": []}
    )
    #: The target's new rows, for the remote vector service.
    inserted: list[Item] = field(default_factory=list)
    #: The source's ref of each row copied -> the target's (the declarations follow it).
    ref_map: dict[str, str] = field(default_factory=dict)


def validate(source: str, target: str, strategy: str, mode: str) -> str | None:
    """The refusal for arguments no merge can run with, or None (checked before the pause)."""
    if not source:
        return "source_agent_id is required"
    if not target:
        return "target_agent_id is required"
    if source == target:
        return "source_agent_id and target_agent_id must differ"
    if strategy not in STRATEGIES:
        return f"Unsupported strategy '{strategy}'. Currently supported: 'skip'"
    if mode not in MODES:
        return f"Invalid mode '{mode}'. Supported: 'copy', 'move'"
    return None


def merge_memories(
    engine: Host,
    source: str,
    target: str,
    strategy: str = "skip",
    mode: str = "copy",
    dry_run: bool = False,
    *,
    paused: bool = False,
) -> dict[str, Any]:
    """Merge `source` into `target`; the tool's response object.

    `paused` is the no-persist hook (issue 5): after validation a non-dry run answers the zero
    tally with `dry_run: true`; the pause feature adds its markers.
    """
    problem = validate(source, target, strategy, mode)
    if problem is not None:
        return {"ok": False, "error": problem}
    head = {
        "source_agent_id": source,
        "target_agent_id": target,
    }
    tally = _Tally()
    if paused and not dry_run:
        return _success(head, strategy, mode, tally, dry_run=True)
    moved: dict[str, Any] | None = None
    carried: dict[str, int] | None = None
    try:
        if dry_run:
            with bulk.snapshot(engine.db) as rows:
                _copy_all(rows, source, target, tally, write=False)
                carried = _carry(rows, source, target, tally, dry_run=True)
        else:
            with bulk.transaction(engine.db) as rows:
                _copy_all(rows, source, target, tally, write=True)
                carried = _carry(rows, source, target, tally, dry_run=False)
                if mode == "move":
                    moved = _delete_copied(rows, source, tally)
    except Exception as exc:  # one transaction: both agents are as they were
        log.warning("merge %s -> %s rolled back: %s", source, target, exc)
        return {
            "ok": False,
            "error": f"merge aborted and rolled back: {exc}",
            "dry_run": dry_run,
            **head,
            **tally.fields("merged", rolled_back=True),
            "profile_copied": False,
            "skipped_profile": tally.skipped_profile,
        }
    if not dry_run:
        engine.after_write()
        if engine.remote is not None:
            engine.remote.index(target, tally.inserted)
    out = _success(head, strategy, mode, tally, dry_run=dry_run)
    if carried is not None:  # 2.6.14's key, only when the source declares something
        out["associations"] = carried
    if moved is not None:
        left = moved.pop("left")
        if engine.remote is not None:
            _remote_move(engine.remote, source, tally, emptied=not any(left.values()))
        if not any(left.values()):
            # The source agent is gone: its calibration goes with it (as delete_agent_data).
            forget_agent(engine, source)
        out["source_deleted"] = {"ok": True, "agent_id": source, **moved}
        out["left_at_source"] = left
    log.info(
        "merge %s -> %s (%s%s): %s memories (+%s skipped), %s episodes (+%s skipped)",
        source,
        target,
        mode,
        ", dry run" if dry_run else "",
        *tally.logged(),
    )
    return out


def _remote_move(remote: RemoteVectors, source: str, tally: _Tally, *, emptied: bool) -> None:
    """The source's moved rows leave its namespace; an emptied source is purged (§12.4)."""
    if emptied:
        remote.purge(source)
        return
    ids = [f"mem:{i}" for i in tally.copied["memories"]]
    ids += [f"ep:{i}" for i in tally.copied["episodes"]]
    remote.remove(source, ids)


def _success(
    head: dict[str, Any], strategy: str, mode: str, tally: _Tally, *, dry_run: bool
) -> dict[str, Any]:
    return {
        "ok": True,
        "dry_run": dry_run,
        **head,
        "strategy": strategy,
        "mode": mode,
        **tally.fields("merged"),
        "profile_copied": tally.profile_copied,
        "skipped_profile": tally.skipped_profile,
    }


def _copy_all(rows: bulk.Rows, source: str, target: str, tally: _Tally, *, write: bool) -> None:
    """Decide (and when `write`, perform) every copy. A preview remembers what it would have
    copied, so a duplicate later in the source is counted as a real run counts it."""
    seen_msg: set[tuple[str, str]] = set()
    seen_content: set[tuple[str, str, str]] = set()
    for mem in rows.iter_memories(source, with_embeddings=write):
        if not mem.content:
            continue
        msg_key, content_key = (
            (mem.project_id, mem.msg_id),
            (
                mem.project_id,
                mem.channel,
                mem.content,
            ),
        )
        duplicate = (
            (mem.msg_id != "" and msg_key in seen_msg)
            or content_key in seen_content
            or rows.memory_exists(target, mem.project_id, mem.channel, mem.msg_id, mem.content)
        )
        new_id = None
        if not duplicate and write:
            new_id = rows.insert_memory(replace(mem, agent_id=target))
            duplicate = new_id is None
            if new_id is not None:
                tally.inserted.append(Item(f"mem:{new_id}", mem.content))
        if duplicate:
            tally.skipped_memories += 1
            continue
        if not write:
            if mem.msg_id:
                seen_msg.add(msg_key)
            seen_content.add(content_key)
        tally.memories += 1
        tally.copied["memories"].append(mem.id)
        tally.ref_map[f"mem:{mem.id}"] = f"mem:{new_id if write else 0}"

    seen_episode: set[tuple[str, str, str]] = set()
    for ep in rows.iter_episodes(source, with_embeddings=write):
        if not ep.summary:
            continue
        key = (ep.project_id, ep.channel, ep.summary)
        if key in seen_episode or rows.episode_exists(target, *key):
            tally.skipped_episodes += 1
            continue
        ep_id = 0
        if write:
            ep_id = rows.insert_episode(replace(ep, agent_id=target))
            tally.inserted.append(Item(f"ep:{ep_id}", ep.summary))
        else:
            seen_episode.add(key)
        tally.episodes += 1
        tally.copied["episodes"].append(ep.id)
        tally.ref_map[f"ep:{ep.id}"] = f"ep:{ep_id}"

    for prof in list(rows.iter_profiles(source)):
        if not prof.content:
            continue
        if rows.profile_exists(target, prof.user_id):
            tally.skipped_profile = True
            continue
        if write:
            rows.insert_profile(replace(prof, agent_id=target))
        tally.profile_copied = True
        tally.copied["profiles"].append(prof.id)


def _carry(
    rows: bulk.Rows, source: str, target: str, tally: _Tally, *, dry_run: bool
) -> dict[str, int] | None:
    """The source's declarations carried to the target in the same transaction, their refs
    following the rows copied (issue 32); None when the source declares nothing."""
    graph = rows.read_graph(source)
    if not graph:
        return None
    done = rows.carry_graph(graph, tally.ref_map, agent_id=target, dry_run=dry_run)
    return {**done.counts(), "dropped": done.dropped}


def _delete_copied(rows: bulk.Rows, source: str, tally: _Tally) -> dict[str, Any]:
    """Remove from the source exactly what was copied; the counts and what is left."""
    deleted = {
        f"deleted_{table}": rows.delete_ids(table, source, ids)
        for table, ids in tally.copied.items()
    }
    left = rows.count_rows(source)
    remaining = {"memories": left.memories, "episodes": left.episodes, "profiles": left.profiles}
    # The legacy task queue is per agent, not per row: cleared only when the agent is gone.
    pending = 0 if any(remaining.values()) else rows.delete_pending_tasks(source)
    if not any(remaining.values()):  # an emptied source keeps no declarations of its own
        rows.delete_graph(source)
    return {
        "deleted_memories": deleted["deleted_memories"],
        "deleted_profiles": deleted["deleted_profiles"],
        "deleted_episodes": deleted["deleted_episodes"],
        "deleted_pending_tasks": pending,
        "left": remaining,
    }
