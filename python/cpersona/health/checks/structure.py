"""Checks 10-14: the database's structure (the FTS5 indexes, the schema version, the msg_id
UNIQUE index, the indexes and triggers cpersona creates, SQLite's page check). All but
`schema_version` inspect what only an SQLite file holds (their `Applies`); their repairs act
on whole objects."""

from __future__ import annotations

import re
from typing import Any

from cpersona.health.check import EVERYWHERE, Applies, Check, Phase
from cpersona.health.context import HealthContext
from cpersona.health.issue import UNSET, Fixable, Issue, Skipped, finding, internal, skipped
from cpersona.storage.error_kinds import ConstraintError, StorageError
from cpersona.storage.schema import SCHEMA_VERSION
from cpersona.storage.upkeep.handle import Subject, count, schema_version, table_exists
from cpersona.storage.upkeep.sqlite_objects import (
    QUICK_CHECK_ELSEWHERE,
    SCHEMA_OBJECTS,
    blank_colliding_msg_ids,
    create_msg_id_index,
    fts_problem,
    fts_rebuild,
    msg_id_colliders,
    object_sql,
    quick_check,
    recreate_object,
)

#: The newest upstream schema cpersona has been shown to serve (CPersona 2.6.14's file in the
#: test fixtures: tests/admin/test_health_history.py).
TESTED_UPSTREAM_SCHEMA = 21


@finding("fts_integrity", "critical")
class FtsIntegrity(Fixable):
    table: str
    missing: bool = UNSET
    detail: str = UNSET
    repairable: int = 1


def fts_integrity(ctx: HealthContext) -> list[Issue]:
    if not ctx.settings.fts_enabled:
        return skipped("fts_integrity", "full-text search is disabled (CPERSONA_FTS_ENABLED)")
    out: list[Issue] = []
    for table in ("memories_fts", "episodes_fts"):
        if not table_exists(ctx.c, table):
            out.append(FtsIntegrity(table=table, missing=True))
            continue
        problem = fts_problem(ctx.c, table)
        if problem is not None and "readonly" in problem:
            problem = _fts_counts_problem(ctx, table)
        if problem is not None:
            out.append(FtsIntegrity(table=table, detail=problem))
    return out


def _fts_counts_problem(ctx: HealthContext, table: str) -> str | None:
    # A read-only connection cannot run FTS5's integrity-check (an INSERT command); compare
    # the index's document count with its content table instead.
    content = "memories" if table == "memories_fts" else "episodes"
    try:
        indexed = count(ctx.c, f"{table}_docsize")
    except Exception as exc:
        return f"unreadable: {exc}"
    rows = count(ctx.c, content)
    return None if indexed == rows else f"{indexed} rows indexed, {rows} in {content}"


def rebuild_fts(ctx: HealthContext, issues: list[Issue]) -> None:
    handle = ctx.write_handle
    fts_rebuild(handle)
    for i in issues:
        if isinstance(i, FtsIntegrity):
            problem = fts_problem(handle, i.table)
            i.fixed = problem is None
            if problem is not None:
                i.fix_error = problem


@finding("schema_version")
class SchemaVersionIssue(Issue):
    """A finding of the schema_version check: the version found, and the one cpersona writes."""

    found: int
    expected: int


@finding(severity="info", type_name="schema_version_newer")
class SchemaVersionNewer(SchemaVersionIssue):
    """A store a newer upstream CPersona (2.6.x) has upgraded: history, not damage."""

    hint: str


@finding(severity="critical")
class SchemaVersionOlder(SchemaVersionIssue):
    """A store older than cpersona's schema (its type is the check's name, as in 2.5.x)."""


def check_schema_version(ctx: HealthContext) -> list[Issue]:
    found = schema_version(ctx.c)
    if found == SCHEMA_VERSION:
        return []
    if found > SCHEMA_VERSION:
        # cpersona serves the tables it knows and leaves the newer ones alone, and what it
        # needs is checked by schema_objects (issue 21).
        note = (
            "tested with this version"
            if found <= TESTED_UPSTREAM_SCHEMA
            else f"newer than the newest tested ({TESTED_UPSTREAM_SCHEMA})"
        )
        return [
            SchemaVersionNewer(
                found=found,
                expected=SCHEMA_VERSION,
                hint=f"written by a newer upstream CPersona; cpersona serves it ({note}) and "
                "leaves its newer tables as they are",
            )
        ]
    return [SchemaVersionOlder(found=found, expected=SCHEMA_VERSION)]


@finding("dedup_msg_id_index", "critical", type_name="dedup_msg_id_index_missing")
class MsgIdIndexMissing(Fixable):
    colliding_rows: int
    locked_colliding_rows: int
    cross_agent: bool = True
    msg_ids_blanked: int = UNSET
    _tail = ("repairable", "msg_ids_blanked", "fixed", "fix_error")


def dedup_msg_id_index(ctx: HealthContext) -> list[MsgIdIndexMissing]:
    if object_sql(ctx.c, "idx_memories_dedup_msg_id") is not None:
        return []
    rows = msg_id_colliders(ctx.c)
    unlocked = sum(1 for locked in rows if not locked)
    blocked = len(rows) - unlocked
    return [
        MsgIdIndexMissing(
            colliding_rows=len(rows),
            locked_colliding_rows=blocked,
            repairable=unlocked + (0 if blocked else 1),
        )
    ]


def restore_msg_id_index(ctx: HealthContext, issues: list[MsgIdIndexMissing]) -> None:
    handle = ctx.write_handle
    blanked = blank_colliding_msg_ids(handle)
    for i in issues:
        i.msg_ids_blanked = blanked
        try:
            create_msg_id_index(handle)
            i.fixed = True
        except ConstraintError as exc:
            i.fixed = False
            i.fix_error = f"locked rows still collide: {exc}"


@finding("schema_objects")
class SchemaObject(Fixable):
    """An index or trigger of cpersona's schema that is missing or differs from its DDL."""

    object: str
    kind: str
    repairable: int = 1
    state: str = internal(str)


def _normalise_ddl(text: str) -> str:
    text = re.sub(r"(?i)\bif\s+not\s+exists\b", " ", text)
    text = re.sub(r"[\"'`\[\]]", "", text.lower())
    text = re.sub(r"\s+", " ", text)
    return re.sub(r"\s*([(),;=<>])\s*", r"\1", text).strip()


def schema_objects(ctx: HealthContext) -> list[SchemaObject]:
    out = []
    for name, (kind, ddl, critical) in SCHEMA_OBJECTS.items():
        if kind == "trigger" and not ctx.settings.fts_enabled:
            continue
        found = object_sql(ctx.c, name)
        if found is None:
            state = "missing"
        elif _normalise_ddl(found) != _normalise_ddl(ddl):
            state = "drifted"
        else:
            continue
        out.append(
            SchemaObject(
                type=f"schema_object_{state}",
                severity="critical" if critical else "warn",
                object=name,
                kind=kind,
                state=state,
            )
        )
    return out


def recreate_objects(ctx: HealthContext, issues: list[SchemaObject]) -> None:
    for i in issues:
        try:
            # A drifted object is dropped and recreated; on failure the savepoint restores it.
            recreate_object(ctx.write_handle, i.object, drifted=i.state == "drifted")
            i.fixed = True
        except StorageError as exc:
            i.fixed = False
            i.fix_error = (
                f"{exc} (duplicates block a UNIQUE index: run the "
                "duplicate_content repair, or unlock the rows)"
                if isinstance(exc, ConstraintError)
                else str(exc)
            )


@finding("sqlite_integrity", "critical")
class SqliteIntegrity(Issue):
    messages: list[str]
    hint: str = "restore the database from a backup"


def sqlite_integrity(ctx: HealthContext) -> list[SqliteIntegrity]:
    messages = quick_check(ctx.c)
    if messages == ["ok"]:
        return []
    return [SqliteIntegrity(messages=messages[:10])]


CHECKS: tuple[Check[Any], ...] = (
    Check(
        "fts_integrity",
        "warn",
        fts_integrity,
        (FtsIntegrity, Skipped),
        Applies(
            frozenset({Subject.FTS5_TABLES}),
            "PostgreSQL has no FTS5 tables: the full-text index is the Rust core's, kept "
            "current from fts_log and rebuilt when it disagrees",
        ),
        repair=rebuild_fts,
    ),
    Check(
        "schema_version",
        "critical",
        check_schema_version,
        (SchemaVersionNewer, SchemaVersionOlder),
        EVERYWHERE,
    ),
    Check(
        "dedup_msg_id_index",
        "critical",
        dedup_msg_id_index,
        (MsgIdIndexMissing,),
        Applies(
            frozenset({Subject.SQLITE_DDL}),
            "reads SQLite's schema table; on PostgreSQL the UNIQUE indexes are part of the "
            "schema cpersona creates",
        ),
        repair=restore_msg_id_index,
    ),
    Check(
        "schema_objects",
        "critical",
        schema_objects,
        (SchemaObject,),
        Applies(
            frozenset({Subject.SQLITE_DDL}),
            "compares SQLite DDL text (FTS5 triggers, SQLite indexes); PostgreSQL's schema "
            "objects are created and migrated by cpersona's PostgreSQL schema",
        ),
        repair=recreate_objects,
    ),
    Check(
        "sqlite_integrity",
        "critical",
        sqlite_integrity,
        (SqliteIntegrity,),
        # The reason names the pragma, so it is written beside the SQL (tests/test_seam.py).
        Applies(frozenset({Subject.DATABASE_FILE}), QUICK_CHECK_ELSEWHERE),
        phase=Phase.BEFORE_LOCK,
    ),
)
