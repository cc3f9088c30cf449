"""The `fix=true` repairs of the registry (surface.md §9.2), one per fix-capable check.

A repair runs inside the fix run's transaction, in its check's savepoint, right after the
check's detection; it writes what `ctx.scratch[<check>]` planned and records what it did on
the issue (`fixed`, and per-check fields). Data repairs skip locked rows (their SQL says
`locked = 0`) except where the spec says otherwise: the embedding repairs touch only the
embedding column, and schema, FTS, file and cross-agent repairs act on whole objects.

Repairs that leave a row without a vector note it in `issue["_nulled"]`; the runner's second
re-embed pass (after the transaction, outside the write lock) fills them in.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from cpersona.health import credentials
from cpersona.health.checks import TABLES, Issue
from cpersona.health.context import HealthContext
from cpersona.storage import health as sql
from cpersona.storage.errors import ConstraintError, StorageError

Repair = Callable[[HealthContext, list[Issue]], None]


def _handle(ctx: HealthContext) -> sql.Handle:
    assert ctx.handle is not None, "repairs run inside the fix transaction"
    return ctx.handle


def _rewrite(ctx: HealthContext, issues: list[Issue], check: str) -> None:
    handle = _handle(ctx)
    done: dict[str, list[int]] = {"updated": [], "deleted": []}
    for row_id, text in ctx.scratch.get(check, []):
        outcome = sql.rewrite_content(handle, row_id, text)
        if outcome in done:
            done[outcome].append(row_id)
    for i in issues:
        i.update(
            fixed=len(done["updated"]) + len(done["deleted"]),
            rewritten=len(done["updated"]),
            deleted_collisions=len(done["deleted"]),
        )
        i["_nulled"] = ("memories", done["updated"])


def memory_annotation(ctx: HealthContext, issues: list[Issue]) -> None:
    _rewrite(ctx, issues, "memory_annotation")


def discord_mention(ctx: HealthContext, issues: list[Issue]) -> None:
    _rewrite(ctx, issues, "discord_mention")


def oversized_content(ctx: HealthContext, issues: list[Issue]) -> None:
    ids = ctx.scratch.get("oversized_content", [])
    clashed = sql.truncate_memories(_handle(ctx), ids, ctx.settings.max_content_length)
    cut = [i for i in ids if i not in set(clashed)]
    for i in issues:
        i.update(fixed=len(cut), lossy=True)
        if clashed:
            i["fix_error"] = (
                f"{len(clashed)} rows would duplicate another row once cut and "
                "were left as they are"
            )
        i["_nulled"] = ("memories", cut)


def duplicate_content(ctx: HealthContext, issues: list[Issue]) -> None:
    deleted = sql.delete_unlocked_memories(_handle(ctx), ctx.scratch.get("duplicate_content", []))
    for i in issues:
        i["fixed"] = deleted


def embedding_dimension(ctx: HealthContext, issues: list[Issue]) -> None:
    by_table: dict[str, list[int]] = ctx.scratch.get("embedding_dimension", {})
    fixed = sum(sql.null_embeddings(_handle(ctx), t, ids) for t, ids in by_table.items())
    for i in issues:
        i["fixed"] = fixed
        i["_nulled_tables"] = {t: ids for t, ids in by_table.items() if ids}


def nonfinite_embedding(ctx: HealthContext, issues: list[Issue]) -> None:
    for i in issues:
        ids = ctx.scratch.get(f"nonfinite_embedding:{i['table']}", [])
        i["fixed"] = sql.null_embeddings(_handle(ctx), i["table"], ids)
        i["_nulled"] = (i["table"], ids)


def _reembed(ctx: HealthContext, issues: list[Issue], table: str) -> None:
    rows = ctx.prepared.get(table, [])
    written = sql.set_embeddings(_handle(ctx), table, rows)
    for i in issues:
        i["re_embedded"] = written
        i["fixed"] = written
        i["remaining"] = max(0, i["count"] - written)
        error = ctx.scratch.get(f"reembed_error:{table}")
        if error:
            i["fix_error"] = error


def null_embedding(ctx: HealthContext, issues: list[Issue]) -> None:
    _reembed(ctx, issues, "memories")


def null_episode_embedding(ctx: HealthContext, issues: list[Issue]) -> None:
    _reembed(ctx, issues, "episodes")


def fts_integrity(ctx: HealthContext, issues: list[Issue]) -> None:
    handle = _handle(ctx)
    sql.fts_rebuild(handle)
    for i in issues:
        problem = sql.fts_problem(handle, i["table"])
        i["fixed"] = problem is None
        if problem is not None:
            i["fix_error"] = problem


def dedup_msg_id_index(ctx: HealthContext, issues: list[Issue]) -> None:
    handle = _handle(ctx)
    blanked = sql.blank_colliding_msg_ids(handle)
    for i in issues:
        i["msg_ids_blanked"] = blanked
        try:
            sql.create_msg_id_index(handle)
            i["fixed"] = True
        except ConstraintError as exc:
            i["fixed"] = False
            i["fix_error"] = f"locked rows still collide: {exc}"


def schema_objects(ctx: HealthContext, issues: list[Issue]) -> None:
    handle = _handle(ctx)
    plan = {name: state for name, _, _, state in ctx.scratch.get("schema_objects", [])}
    for i in issues:
        try:
            # A drifted object is dropped and recreated; on failure the savepoint restores it.
            sql.recreate_object(handle, i["object"], drifted=plan[i["object"]] == "drifted")
            i["fixed"] = True
        except StorageError as exc:
            i["fixed"] = False
            i["fix_error"] = (
                f"{exc} (duplicates block a UNIQUE index: run the "
                "duplicate_content repair, or unlock the rows)"
                if isinstance(exc, ConstraintError)
                else str(exc)
            )


def invalid_json(ctx: HealthContext, issues: list[Issue]) -> None:
    fixed = sql.reset_json(_handle(ctx), ctx.scratch.get("invalid_json", []))
    for i in issues:
        i["fixed"] = fixed


def _timestamps(ctx: HealthContext, issues: list[Issue], check: str) -> None:
    fixed = sql.timestamps_from_created_at(_handle(ctx), ctx.scratch.get(check, []))
    for i in issues:
        i["fixed"] = fixed


def invalid_timestamp(ctx: HealthContext, issues: list[Issue]) -> None:
    _timestamps(ctx, issues, "invalid_timestamp")


def future_timestamp(ctx: HealthContext, issues: list[Issue]) -> None:
    _timestamps(ctx, issues, "future_timestamp")


def missing_episode_start_time(ctx: HealthContext, issues: list[Issue]) -> None:
    fixed = sql.start_times_from_created_at(
        _handle(ctx), ctx.scratch.get("missing_episode_start_time", [])
    )
    for i in issues:
        i["fixed"] = fixed


def timestamp_format_drift(ctx: HealthContext, issues: list[Issue]) -> None:
    fixed = sql.set_timestamps(_handle(ctx), ctx.scratch.get("timestamp_format_drift", []))
    for i in issues:
        i["fixed"] = fixed


def episode_timestamp_format_drift(ctx: HealthContext, issues: list[Issue]) -> None:
    fixed = sql.set_episode_times(
        _handle(ctx), ctx.scratch.get("episode_timestamp_format_drift", [])
    )
    for i in issues:
        i["fixed"] = fixed


def stale_pending_tasks(ctx: HealthContext, issues: list[Issue]) -> None:
    fixed = sql.delete_tasks(_handle(ctx), ctx.scratch.get("stale_pending_tasks", []))
    for i in issues:
        i["fixed"] = fixed


def empty_content(ctx: HealthContext, issues: list[Issue]) -> None:
    fixed = sql.delete_unlocked_memories(_handle(ctx), ctx.scratch.get("empty_content", []))
    for i in issues:
        i["fixed"] = fixed


def invalid_source_type(ctx: HealthContext, issues: list[Issue]) -> None:
    mapped = sql.set_sources(_handle(ctx), ctx.scratch.get("invalid_source_type", []))
    for i in issues:
        i.update(fixed=mapped, mapped=mapped)


def oversized_profile(ctx: HealthContext, issues: list[Issue]) -> None:
    fixed = sql.truncate_profiles(
        _handle(ctx), ctx.scratch.get("oversized_profile", []), ctx.settings.max_profile_length
    )
    for i in issues:
        i.update(fixed=fixed, lossy=True)


def file_permissions(ctx: HealthContext, issues: list[Issue]) -> None:
    fixed, errors = 0, []
    for path in ctx.scratch.get("file_permissions", []):
        try:
            os.chmod(path, 0o600)
            fixed += 1
        except OSError as exc:
            errors.append(f"{path}: {exc}")
    for i in issues:
        i["fixed"] = fixed
        if errors:
            i["fix_error"] = "; ".join(errors)


def embedding_model(ctx: HealthContext, issues: list[Issue]) -> None:
    """NULL the vectors another model made; the second re-embed pass replaces them."""
    what = ctx.scratch.get("embedding_model")
    if what is None:
        return
    handle = _handle(ctx)
    nulled: dict[str, list[int]] = {}
    if isinstance(what, tuple):  # ("rows", {table: ids}): the foreign rows the probe found
        for table, ids in what[1].items():
            sql.null_embeddings(handle, table, ids)
            nulled[table] = list(ids)
        for i in issues:
            i["fixed"] = sum(len(ids) for ids in nulled.values())
            i["_nulled_tables"] = nulled
        return
    for table in TABLES:
        if what == "width" and ctx.dim is not None:
            ids = sql.wrong_width(handle, table, ctx.dim * 4, ctx.agent_id)
            sql.null_embeddings(handle, table, ids)
            nulled[table] = ids
        else:
            nulled[table] = [
                i for batch in sql.iter_embeddings(handle, table, ctx.agent_id) for i, _ in batch
            ]
            sql.null_all_embeddings(handle, table, ctx.agent_id)
    for i in issues:
        i["fixed"] = sum(len(ids) for ids in nulled.values())
        i["_nulled_tables"] = nulled


#: Post-commit repairs (outside the write lock): the vector index rebuild.
def vector_index(ctx: HealthContext, issues: list[Issue]) -> None:
    assert ctx.indexes is not None
    for i in issues:
        if i.get("repairable"):
            index = ctx.indexes[i["table"]]
            index.rebuild()
            problems = index.verify()
            i["fixed"] = not problems
            if problems:
                i["fix_error"] = "; ".join(problems[:3])


REPAIRS: dict[str, Repair] = {
    "memory_annotation": memory_annotation,
    "discord_mention": discord_mention,
    "oversized_content": oversized_content,
    "duplicate_content": duplicate_content,
    "embedding_dimension": embedding_dimension,
    "nonfinite_embedding": nonfinite_embedding,
    "null_embedding": null_embedding,
    "null_episode_embedding": null_episode_embedding,
    "fts_integrity": fts_integrity,
    "dedup_msg_id_index": dedup_msg_id_index,
    "schema_objects": schema_objects,
    "invalid_json": invalid_json,
    "invalid_timestamp": invalid_timestamp,
    "future_timestamp": future_timestamp,
    "missing_episode_start_time": missing_episode_start_time,
    "timestamp_format_drift": timestamp_format_drift,
    "episode_timestamp_format_drift": episode_timestamp_format_drift,
    "stale_pending_tasks": stale_pending_tasks,
    "empty_content": empty_content,
    "invalid_source_type": invalid_source_type,
    "oversized_profile": oversized_profile,
    "file_permissions": file_permissions,
    "vector_index": vector_index,
    "embedding_model": embedding_model,
    credentials.CHECK: credentials.repair,
}
#: Repairs that must not run under the write lock (they run after the commit).
AFTER_COMMIT = frozenset({"vector_index"})
