"""The `stored_credentials` check and repair (issue 22): rows that already hold credentials.

Rows written by CPersona 2.5.x, or by cpersona under CPERSONA_SECRETS=allow, may hold what a
write now redacts. The check reads every stored text (memories' content and metadata, episodes'
summary and keywords, profiles) through the write path's detector and reports, per table, the
row ids and the kinds found, never a value. `fix=true` writes the redacted texts in place, in
the fix transaction: a memory's or episode's vector is dropped and re-embedded from the
redacted text by the fix run's second pass, and the triggers' change logs bring both index
files current. Under CPERSONA_SECRETS=allow the finding is report-only (the operator keeps
credentials on purpose); locked memories are reported, never rewritten.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from cpersona.health.check import EVERYWHERE, Check
from cpersona.health.context import HealthContext
from cpersona.health.issue import UNSET, Reembedded, finding, internal
from cpersona.storage import secret_scan
from cpersona.storage.upkeep.embedding_rows import texts_by_id
from cpersona.storage.upkeep.handle import reading

if TYPE_CHECKING:
    from cpersona.engine import Engine
    from cpersona.vectors.remote import RemoteVectors

CHECK = "stored_credentials"
SAMPLE_IDS = 10
ALLOW_HINT = (
    "CPERSONA_SECRETS=allow keeps credentials verbatim; with redact (the default), "
    "check_health(fix=true) redacts these rows in place"
)


@finding(CHECK, "warn")
class StoredCredentials(Reembedded):
    """One table's rows holding what a write now redacts: ids and kinds, never a value."""

    table: str
    count: int
    kinds: dict[str, int]
    locked: int
    sample_ids: list[int]
    hint: str = UNSET
    redacted_rows: int = UNSET
    deleted_collisions: int = UNSET
    #: (agent_id, id, {column: redacted text}) of the rows the repair rewrites.
    plan: list[tuple[str, int, dict[str, str]]] = internal(list)
    _tail = (
        "repairable",
        "sample_ids",
        "hint",
        "fixed",
        "redacted_rows",
        "deleted_collisions",
        "fix_error",
        "re_embedded",
    )


def detect(ctx: HealthContext) -> list[StoredCredentials]:
    # Imported here: the registry is imported at start-up, the detector's patterns are not
    # needed until a check runs (docs/notes/performance-notes.md, "Start-up").
    from cpersona.credentials.detect import redact, redact_json_text

    allow = ctx.settings.secrets == "allow"
    plan: list[tuple[str, str, int, dict[str, str]]] = []
    tables: dict[str, dict[str, Any]] = {}
    for row in secret_scan.stored_texts(ctx.c, ctx.agent_id):
        changes: dict[str, str] = {}
        kinds: dict[str, int] = {}
        for column, text in row.texts.items():
            if not text:
                continue
            # Memories' metadata is JSON text: its strings are redacted and it stays JSON.
            new, found = redact_json_text(text) if column == "metadata" else redact(text)
            if found:
                changes[column] = new
                for kind, n in found.items():
                    kinds[kind] = kinds.get(kind, 0) + n
        if not changes:
            continue
        seen = tables.setdefault(row.table, {"ids": [], "kinds": {}, "locked": 0})
        seen["ids"].append(row.id)
        for kind, n in kinds.items():
            seen["kinds"][kind] = seen["kinds"].get(kind, 0) + n
        if row.locked:
            seen["locked"] += 1
        elif not allow:
            plan.append((row.table, row.agent_id, row.id, changes))
    out: list[StoredCredentials] = []
    for table, seen in tables.items():
        finding = StoredCredentials(
            table=table,
            count=len(seen["ids"]),
            kinds=dict(sorted(seen["kinds"].items())),
            locked=seen["locked"],
            repairable=sum(1 for t, *_ in plan if t == table),
            sample_ids=seen["ids"][:SAMPLE_IDS],
            plan=[(agent, i, changes) for t, agent, i, changes in plan if t == table],
        )
        if allow:
            finding.hint = ALLOW_HINT
        out.append(finding)
    return out


def repair(ctx: HealthContext, issues: list[StoredCredentials]) -> None:
    handle = ctx.write_handle
    for i in issues:
        done: dict[str, list[int]] = {}
        for agent_id, row_id, changes in i.plan:
            outcome = secret_scan.redact_row(handle, i.table, row_id, changes)
            done.setdefault(outcome, []).append(row_id)
            ctx.redacted.append((i.table, agent_id, row_id, outcome))
        updated, deleted = done.get("updated", []), done.get("deleted", [])
        i.fixed, i.redacted_rows = len(updated) + len(deleted), len(updated)
        if deleted:
            i.deleted_collisions = len(deleted)
        if i.table in ("memories", "episodes"):
            i.nulled = {i.table: updated}


def after_fix(engine: Engine, ctx: HealthContext) -> None:
    """After a fix run's commit (the tool and `cpersona checkup --fix`): rewritten rows reach
    both index files now, not at the next read; where this repair redacted rows, no copy
    outside the database may keep the credential: the full-text file appends a row's new text
    and keeps the old record until compaction (so it is rewritten, as is the vector file),
    and the remote service has its own copy of each text."""
    engine.after_write()
    for table in sorted(_copies_outside(ctx, engine.remote)):
        for index in (engine.fts.get(table), engine.indexes.get(table)):
            if index is not None:
                index.rebuild()


def _copies_outside(ctx: HealthContext, remote: RemoteVectors | None) -> set[str]:
    """After the fix run's commit: tell the remote vector service the redacted texts (it keeps
    its own copy of each row's text) and forget the rows the repair deleted; the tables whose
    local index files must be rewritten (they keep a rewritten row's old record)."""
    rewritten = {table for table, _, _, outcome in ctx.redacted if outcome != "missing"}
    if remote is not None:
        from cpersona.vectors.remote import Item

        for table, prefix in (("memories", "mem"), ("episodes", "ep")):
            rows = [(agent, i, outcome) for t, agent, i, outcome in ctx.redacted if t == table]
            texts = texts_by_id(reading(ctx.db), table, [i for _, i, o in rows if o == "updated"])
            for agent in sorted({agent for agent, _, _ in rows}):
                items = [
                    Item(f"{prefix}:{i}", texts[i]) for a, i, _ in rows if a == agent and i in texts
                ]
                gone = [f"{prefix}:{i}" for a, i, o in rows if a == agent and o == "deleted"]
                if items:
                    remote.index(agent, items)
                if gone:
                    remote.remove(agent, gone)
    return rewritten & {"memories", "episodes"}


CHECKS: tuple[Check[Any], ...] = (
    Check(CHECK, "warn", detect, (StoredCredentials,), EVERYWHERE, repair=repair),
)
