"""Checks 28-32: this host's configuration and files (the local vector fallback, the vector
index files, the operating context file, file modes)."""

from __future__ import annotations

import os
from dataclasses import asdict
from pathlib import Path
from typing import Any

from cpersona.health.check import EVERYWHERE, Applies, Check, Phase
from cpersona.health.checks.embeddings import TABLES
from cpersona.health.context import HealthContext
from cpersona.health.issue import Fixable, Issue, Skipped, finding, internal, skipped
from cpersona.operating_context import SUMMARY_SOFT_LIMIT
from cpersona.storage.upkeep.embedding_rows import width_counts
from cpersona.storage.upkeep.handle import Subject, subjects


@finding("vector_fallback_config", "info", type_name="no_local_vector_fallback")
class NoLocalVectorFallback(Issue):
    hint: str = "with the remote vector service down, recall has no local vectors"


def vector_fallback_config(ctx: HealthContext) -> list[NoLocalVectorFallback]:
    s = ctx.settings
    if s.vector_search_mode == "remote" and not s.store_blob:
        return [NoLocalVectorFallback()]
    return []


@finding("vector_index")
class VectorIndexIssue(Issue):
    """A finding of the vector_index check about one table's index file."""

    table: str


@finding(severity="info", type_name="vector_index_absent")
class IndexNotBuilt(VectorIndexIssue):
    """Read-only: the file is not there yet, and the server builds it when it starts."""

    rows: int
    hint: str = "the server builds it when it starts"


@finding()
class IndexUnusable(VectorIndexIssue, Fixable):
    """The file is missing (`vector_index_absent`) or cannot be used (`_unusable`)."""

    reason: str
    repairable: int = 1


@finding(severity="info", type_name="vector_index_behind")
class IndexBehind(VectorIndexIssue):
    applied_seq: int
    log_seq: int


@finding(severity="warn", type_name="vector_index_mismatch")
class IndexMismatch(VectorIndexIssue, Fixable):
    count: int
    samples: list[str]
    repairable: int = 1


@finding(severity="info", type_name="vector_index_rebuilding")
class IndexRebuilding(VectorIndexIssue):
    """Being rebuilt in the background on this host (issue 20): how far, and no verify meanwhile."""

    reason: str
    done: int
    total: int
    pid: int


def vector_index(ctx: HealthContext) -> list[Issue]:
    if ctx.indexes is None:
        return skipped(
            "vector_index",
            "the index files are not open (never indexed by "
            "cpersona; the server builds them at its first start)",
        )
    out: list[Issue] = []
    for table, index in ctx.indexes.items():
        embedded = sum(width_counts(ctx.c, table, "").values())
        if ctx.read_only and not index.path.exists():
            if embedded:
                out.append(IndexNotBuilt(table=table, rows=embedded))
            continue
        status = index.status()
        if status.rebuild is not None:
            # The finding says what the build lock file says, field for field.
            out.append(IndexRebuilding(table=table, **asdict(status.rebuild)))
            continue
        if not status.usable:
            if status.reason == "missing" and not embedded:
                continue
            severity = "info" if status.reason == "missing" else "warn"
            kind = "absent" if severity == "info" else "unusable"
            out.append(
                IndexUnusable(
                    type=f"vector_index_{kind}",
                    severity=severity,
                    table=table,
                    reason=status.reason,
                )
            )
            continue
        if status.applied_seq < status.log_seq and ctx.read_only:
            out.append(
                IndexBehind(table=table, applied_seq=status.applied_seq, log_seq=status.log_seq)
            )
            continue
        problems = index.verify()
        if problems:
            out.append(IndexMismatch(table=table, count=len(problems), samples=problems[:5]))
    return out


def rebuild_index(ctx: HealthContext, issues: list[Issue]) -> None:
    """After the commit (outside the write lock), against the repaired rows."""
    assert ctx.indexes is not None
    for i in issues:
        if isinstance(i, IndexUnusable | IndexMismatch) and i.repairable:
            index = ctx.indexes[i.table]
            index.rebuild()
            problems = index.verify()
            i.fixed = not problems
            if problems:
                i.fix_error = "; ".join(problems[:3])


@finding("operating_context_parse", "warn")
class OperatingContextParse(Issue):
    path: str
    detail: str
    hint: str = "the operating context is dormant until the file is fixed"


def operating_context_parse(ctx: HealthContext) -> list[OperatingContextParse]:
    problem = ctx.oc.present_but_unusable()
    if problem is None:
        return []
    return [OperatingContextParse(path=ctx.oc.path, detail=problem)]


@finding("operating_context_size", "info")
class OperatingContextSize(Issue):
    chars: int
    limit: int = SUMMARY_SOFT_LIMIT


def operating_context_size(ctx: HealthContext) -> list[OperatingContextSize]:
    context, _ = ctx.oc.load()
    if context is None or len(context.summary) <= SUMMARY_SOFT_LIMIT:
        return []
    return [OperatingContextSize(chars=len(context.summary))]


def _guarded_paths(ctx: HealthContext) -> tuple[list[Path], list[Path]]:
    """The files and directories of cpersona's that exist (a path that is not there is not
    loose: it was never a reason to fail the check, issue 21)."""
    held = subjects(ctx.db)
    files, dirs = _sqlite_paths(ctx) if Subject.DATABASE_FILE in held else _postgresql_paths(ctx)
    return [f for f in files if f.is_file()], [d for d in dirs if d.is_dir()]


def _postgresql_paths(ctx: HealthContext) -> tuple[list[Path], list[Path]]:
    """On PostgreSQL the database's files are the server's; this host keeps the full-text
    index files (their text is the memories') in its cache directory, and the alias ledger."""
    from cpersona.derived.placement import cache_directory

    cache = cache_directory(ctx.settings.cache_dir, ctx.db.path)
    files = [*sorted(cache.glob("index.*")), cache / "database.txt"]
    if ctx.settings.alias_ledger_file:
        files.append(Path(ctx.settings.alias_ledger_file))
    return files, [cache]


def _sqlite_paths(ctx: HealthContext) -> tuple[list[Path], list[Path]]:
    db = Path(ctx.settings.db_path).resolve()
    files = [db, Path(f"{db}-wal"), Path(f"{db}-shm")]
    files += sorted(db.parent.glob(db.name.replace("[", "[[]") + ".calibration.json*"))
    files += [
        db.parent / "update-check.json",
        Path(ctx.settings.alias_ledger_file or db.parent / "alias_ledger.json"),
    ]
    files.append(Path(f"{db}.reembed.lock"))
    for table in TABLES:
        files.append(Path(f"{db}.{table}.vecindex"))  # an earlier release's vector file
        for kind in (".vec", ".fts"):
            # The index file, its checksum sidecar, its lock, its background build's lock, and
            # the full-text segment (every memory's text; 0644 before issue 33).
            files += [Path(f"{db}.{table}{kind}{end}") for end in _DERIVED_ENDS]
    return files, [db.parent]


#: What follows `<db>.<table>.vec` / `.fts` in the names of an index's files.
_DERIVED_ENDS = ("", ".sum", ".lock", ".rebuild", ".seg")


@finding("file_permissions", "warn")
class FilePermissions(Fixable):
    files: list[str]
    directories: list[str]
    #: The files with a group or other mode bit set, which the repair sets to 0600.
    loose: list[Path] = internal(list)


def file_permissions(ctx: HealthContext) -> list[Issue]:
    if ctx.db.is_memory:
        return skipped("file_permissions", "in-memory database: no files")
    if os.name != "posix":
        return skipped("file_permissions", "mode bits are not enforced on this platform")
    files, dirs = _guarded_paths(ctx)
    loose = [f for f in files if f.stat().st_mode & 0o077]
    loose_dirs = [d for d in dirs if d.stat().st_mode & 0o077]
    if not loose and not loose_dirs:
        return []
    return [
        FilePermissions(
            files=[str(f) for f in loose],
            directories=[str(d) for d in loose_dirs],
            repairable=len(loose),
            loose=loose,
        )
    ]


def tighten_modes(ctx: HealthContext, issues: list[Issue]) -> None:
    fixed, errors = 0, []
    for path in (p for i in issues if isinstance(i, FilePermissions) for p in i.loose):
        try:
            os.chmod(path, 0o600)
            fixed += 1
        except OSError as exc:
            errors.append(f"{path}: {exc}")
    for i in issues:
        if isinstance(i, FilePermissions):
            i.fixed = fixed
            if errors:
                i.fix_error = "; ".join(errors)


CHECKS: tuple[Check[Any], ...] = (
    Check(
        "vector_fallback_config",
        "info",
        vector_fallback_config,
        (NoLocalVectorFallback,),
        EVERYWHERE,
    ),
    Check(
        "vector_index",
        "warn",
        vector_index,
        (IndexNotBuilt, IndexUnusable, IndexRebuilding, IndexBehind, IndexMismatch, Skipped),
        Applies(
            frozenset({Subject.VECTOR_FILES}),
            "no local vector index files on PostgreSQL: recall scans the vectors in the "
            "database (pgvector)",
        ),
        repair=rebuild_index,
        phase=Phase.AFTER_COMMIT,
    ),
    Check(
        "operating_context_parse",
        "warn",
        operating_context_parse,
        (OperatingContextParse,),
        EVERYWHERE,
    ),
    Check(
        "operating_context_size",
        "info",
        operating_context_size,
        (OperatingContextSize,),
        EVERYWHERE,
    ),
    Check(
        "file_permissions",
        "warn",
        file_permissions,
        (FilePermissions, Skipped),
        EVERYWHERE,
        repair=tighten_modes,
    ),
)
