"""How a health run goes (surface.md §9.1, "fix-run mechanics"), over the checks it is given.

A report-only run reads: each check that applies to the database detects, and a check whose
subject is absent says `not_applicable`. A fix run:

1. computes every embedding it will need before taking the write lock (the backend probe,
   then each check's `prepare`: the re-embeds of rows without vectors, the model probe);
2. runs the `BEFORE_LOCK` checks (a long read: `sqlite_integrity`);
3. runs the others in one transaction, each detection followed by its repair in its own
   savepoint (a failing repair is rolled back alone and reported as `fix_error`);
4. after the commit: the `AFTER_COMMIT` checks and repairs (the vector index files, judged
   against the repaired rows), then re-embeds the rows the repairs left without a vector
   (second pass, outside the lock).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any

from cpersona.errors import EmbeddingMisconfigured, EmbeddingUnavailable
from cpersona.health.check import Check, Phase
from cpersona.health.context import HealthContext, Probe
from cpersona.health.issue import UNSET, Crashed, Issue, not_applicable
from cpersona.storage.upkeep.embedding_rows import set_embeddings, texts_by_id
from cpersona.storage.upkeep.handle import Subject, fixing, reading, subjects, writing

log = logging.getLogger("cpersona.health")


def _repairable(issue: Issue) -> Any:
    """The finding's `repairable` (UNSET when it has none): rows or objects a fix would write,
    None when unknown."""
    return getattr(issue, "repairable", UNSET)


def _review(issue: Issue) -> Issue:
    # The repairable policy: a finding no fix can touch asks for a human and never degrades.
    if _repairable(issue) is not UNSET and _repairable(issue) == 0:
        issue.needs_human_review = True
        if issue.severity == "warn":
            issue.severity = "info"
    return issue


def _crashed(name: str, exc: BaseException) -> Issue:
    log.exception("health check %s crashed", name)
    return Crashed(check=name, detail=f"{type(exc).__name__}: {exc}")


def _run(
    ctx: HealthContext, check: Check[Any], present: frozenset[Subject], *, repair: bool
) -> list[Issue]:
    if not check.applies.needs <= present:
        return [not_applicable(check.name, check.applies.reason)]
    try:
        issues = list(check.detect(ctx))
    except Exception as exc:
        return [_crashed(check.name, exc)]
    if repair and check.repair is not None and issues:
        _repair(ctx, check, issues)
    return issues


def report(ctx: HealthContext, checks: Sequence[Check[Any]]) -> list[Issue]:
    """One read-only pass over `checks`."""
    ctx.fix, ctx.handle = False, None
    present = subjects(ctx.db)
    return [_review(i) for check in checks for i in _run(ctx, check, present, repair=False)]


def _prepare(ctx: HealthContext, checks: Sequence[Check[Any]]) -> None:
    """Every embedding the fix run needs, computed before the write lock is taken."""
    ctx.reembed_budget = ctx.settings.reembed_row_cap
    if ctx.embedder is None:
        return
    try:
        # A fresh text each run: a cached answer would prove nothing about the backend.
        vectors = ctx.embed([f"cpersona health probe {time.time_ns()}"])
        ctx.probe = Probe(ran=True)
        if ctx.dim is None and vectors and vectors[0] is not None:
            ctx.dim = len(vectors[0]) // 4
    except EmbeddingUnavailable as exc:
        ctx.probe = Probe(
            ran=True, error=str(exc), misconfigured=isinstance(exc, EmbeddingMisconfigured)
        )
        return
    for check in checks:
        if check.prepare is not None:
            check.prepare(ctx)


def _repair(ctx: HealthContext, check: Check[Any], issues: list[Issue]) -> None:
    assert check.repair is not None
    if not any(_repairable(i) not in (UNSET, 0) for i in issues):
        return
    try:
        if check.phase is Phase.AFTER_COMMIT:
            check.repair(ctx, issues)
        else:
            with ctx.write_handle.step():  # a savepoint: a failing repair is rolled back alone
                check.repair(ctx, issues)
    except Exception as exc:
        log.exception("health repair %s failed", check.name)
        for i in issues:
            i.failed(f"{type(exc).__name__}: {exc}")


def fix_run(ctx: HealthContext, checks: Sequence[Check[Any]]) -> list[Issue]:
    _prepare(ctx, checks)
    found: dict[Check[Any], list[Issue]] = {}
    for check in checks:
        if check.phase is Phase.BEFORE_LOCK:  # outside the lock (a long read)
            found[check] = report(ctx, [check])
    present = subjects(ctx.db)
    ctx.fix = True
    with fixing(ctx.db) as handle:
        ctx.handle = handle
        for check in checks:
            if check.phase is Phase.IN_TRANSACTION:
                found[check] = _run(ctx, check, present, repair=True)
    ctx.handle = None
    # The derived index files are judged after the commit, against the repaired rows.
    for check in checks:
        if check.phase is Phase.AFTER_COMMIT:
            found[check] = _run(ctx, check, present, repair=True)
    _second_pass(ctx, [i for issues in found.values() for i in issues])
    return [_review(i) for c in checks for i in found.get(c, [])]


def _second_pass(ctx: HealthContext, issues: list[Issue]) -> None:
    """Re-embed the rows this run's repairs left without a vector (outside the lock)."""
    wanted: dict[str, list[int]] = {"memories": [], "episodes": []}
    for i in issues:
        for table, ids in i.nulled.items():
            wanted[table] += ids
    done: dict[str, set[int]] = {"memories": set(), "episodes": set()}
    usable = ctx.embedder is not None and ctx.probe.error is None
    for table, ids in wanted.items():
        if not ids or not usable or (table == "memories" and not ctx.stores_blobs):
            continue
        if not ctx.takes_configured_vectors(table):
            continue
        ids = sorted(set(ids))[: max(0, ctx.reembed_budget)]
        texts = texts_by_id(reading(ctx.db), table, ids)
        order = [i for i in ids if i in texts]
        blobs, error = ctx.try_embed([texts[i] for i in order])
        rows = [(i, b) for i, b in zip(order, blobs, strict=False) if b is not None]
        if error is None and rows:
            with writing(ctx.db) as handle:
                set_embeddings(handle, table, rows)
            done[table] = {i for i, _ in rows}
            ctx.reembed_budget -= len(rows)
    for i in issues:
        if any(i.nulled.values()):
            # Every finding whose repair leaves rows without a vector declares the field.
            filled = sum(len(done[t] & set(ids)) for t, ids in i.nulled.items())
            setattr(i, "re_embedded", filled)  # noqa: B010
