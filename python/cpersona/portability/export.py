"""`export_memories`: one agent's (or every agent's) rows as a JSONL file (surface.md §8.1).

The file is written from one read snapshot, so the header's counts equal the body, into a
temp file beside the target (0600) that is fsynced and renamed over it: a crash or a full disk
never leaves a half-written backup under the target's name, nor destroys the previous one.
"""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, TypeVar

from cpersona import private_files
from cpersona.portability import records
from cpersona.portability import vectors as kept
from cpersona.portability.paths import confine, names_directory, os_reason, refusal
from cpersona.storage import bulk
from cpersona.storage.error_kinds import StorageError
from cpersona.timerange import TimeRange, row_time

if TYPE_CHECKING:
    from cpersona.portability.host import Host

log = logging.getLogger("cpersona.portability")


def export_memories(
    engine: Host,
    agent_id: str,
    output_path: str,
    include_embeddings: bool = False,
    *,
    confined: bool = True,
    span: TimeRange | None = None,
) -> dict[str, Any]:
    """Write the JSONL export; the tool's response object.

    `confined=False` (the operator's command line) skips the `CPERSONA_EXPORT_DIR` check,
    which guards MCP callers, not the operator who runs the process. `span` keeps only the
    memories and episodes whose instant it admits (cpersona.timerange); profiles, which have
    no instant, are written as without it.
    """
    if not output_path:
        return {"ok": False, "error": "output_path is required"}
    export_dir = engine.settings.export_dir if confined else None
    path = confine(output_path, export_dir)
    if path is None:
        return {"ok": False, "error": refusal("output_path", output_path)}
    if names_directory(path, export_dir):
        # Refused before anything is created: the temp file would go beside the directory.
        return {"ok": False, "error": f"output_path names a directory, not a file: {output_path}"}
    try:
        counts, graph = _write(engine, agent_id, path, include_embeddings, span)
    except OSError as exc:
        # 2.5.x lets these escape as a bare {"error"}; the response-shape rule wants ok:false.
        return {"ok": False, "error": f"could not write {output_path}: {os_reason(exc)}"}
    except (ValueError, StorageError) as exc:
        return {"ok": False, "error": f"could not write {output_path}: {exc}"}
    log.info("exported %s memories, %s episodes, %s profiles to %s", *counts, path)
    out: dict[str, Any] = {
        "ok": True,
        "path": path,
        "memories": counts[0],
        "episodes": counts[1],
        "profiles": counts[2],
    }
    if graph:  # 2.6.14's key, present only when declarations were written
        out["associations"] = graph
    return out


def _write(
    engine: Host, agent_id: str, path: str, include_embeddings: bool, span: TimeRange | None
) -> tuple[tuple[int, int, int], dict[str, int]]:
    directory = os.path.dirname(os.path.abspath(path))
    private_files.make_dirs(directory)
    fd, tmp = tempfile.mkstemp(prefix=os.path.basename(path) + ".tmp.", dir=directory)  # 0600
    scope = agent_id or None
    written = [0, 0, 0]
    graph = None
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as out:
            with bulk.snapshot(engine.db) as rows:
                totals = rows.count_rows(scope)
                n_mem, n_ep = totals.memories, totals.episodes
                if span is not None:  # the header counts what the body holds
                    n_mem = sum(1 for _ in _within(span, rows.iter_memories(scope)))
                    n_ep = sum(1 for _ in _within(span, rows.iter_episodes(scope)))
                head = records.header(agent_id, n_mem, n_ep, totals.profiles)
                # The declared associations (issue 32, 2.6's export 1.1 records), after the
                # records they name; counted in the header only when there are any. A span
                # export leaves them out: what they name may be outside it.
                graph = rows.read_graph(scope) if span is None else None
                if graph:
                    head.update(
                        entity_count=len(graph.entities),
                        mention_count=len(graph.mentions),
                        relation_count=len(graph.relations),
                    )
                if include_embeddings:
                    # Which model made the vectors: an import keeps only its own model's.
                    head["embedding_models"] = kept.export_models(rows.vector_models())
                out.write(records.dumps(head) + "\n")
                mems = rows.iter_memories(scope, with_embeddings=include_embeddings)
                for mem in _within(span, mems):
                    out.write(records.dumps(records.memory_json(mem, include_embeddings)) + "\n")
                    written[0] += 1
                eps = rows.iter_episodes(scope, with_embeddings=include_embeddings)
                for ep in _within(span, eps):
                    out.write(records.dumps(records.episode_json(ep, include_embeddings)) + "\n")
                    written[1] += 1
                for prof in rows.iter_profiles(scope):
                    out.write(records.dumps(records.profile_json(prof)) + "\n")
                    written[2] += 1
                for declared in graph.records() if graph else ():
                    out.write(records.dumps(declared) + "\n")
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _fsync_dir(directory)
    counted = {}
    if graph:
        counted = {
            "entities": len(graph.entities),
            "mentions": len(graph.mentions),
            "relations": len(graph.relations),
        }
    return (written[0], written[1], written[2]), counted


R = TypeVar("R", bulk.MemoryRecord, bulk.EpisodeRecord)


def _within(span: TimeRange | None, found: Iterator[R]) -> Iterator[R]:
    """The records whose instant `span` admits (all of them without a span): a memory's
    timestamp, an episode's start, else the row's created_at (cpersona.timerange)."""
    if span is None:
        return found
    return (rec for rec in found if span.admits(row_time(_stamp(rec), rec.created_at)))


def _stamp(rec: bulk.MemoryRecord | bulk.EpisodeRecord) -> str | None:
    return rec.timestamp if isinstance(rec, bulk.MemoryRecord) else rec.start_time


def _fsync_dir(directory: str) -> None:
    # The rename is durable only once the directory entry is; best effort where unsupported.
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
