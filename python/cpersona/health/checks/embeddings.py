"""Checks 5-9: the stored vectors (wrong width, non-finite values, rows without one) and the
embedding backend's liveness. Their repairs touch only the embedding column, locked rows
included: the vectors of the rows they clear are written again by the fix run's second pass,
outside the write lock."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from cpersona.health.check import EVERYWHERE, Check
from cpersona.health.context import HealthContext, Reembed
from cpersona.health.issue import UNSET, Issue, Reembedded, Skipped, finding, internal, skipped
from cpersona.health.rows import Planned
from cpersona.storage.upkeep.embedding_rows import (
    iter_embeddings,
    missing_embeddings,
    null_embeddings,
    set_embeddings,
    texts_to_embed,
    wrong_width,
)
from cpersona.storage.upkeep.handle import count, reading

TABLES = ("memories", "episodes")


@finding("embedding_dimension", "critical")
class EmbeddingDimension(Reembedded):
    count: int
    by_table: dict[str, int]
    expected_dim: int
    #: The rows of each table whose vector is of another width.
    ids: dict[str, list[int]] = internal(dict)


def embedding_dimension(ctx: HealthContext) -> list[Issue]:
    if ctx.embedder is None:
        return skipped("embedding_dimension", "no embedding backend is configured")
    if ctx.dim is None:
        why = ctx.probe.error or (
            "the backend's width is not known until it answers (fix=true probes it)"
        )
        return skipped("embedding_dimension", why)
    by_table = {t: wrong_width(ctx.c, t, ctx.dim * 4, ctx.agent_id) for t in TABLES}
    total = sum(len(ids) for ids in by_table.values())
    if not total:
        return []
    return [
        EmbeddingDimension(
            count=total,
            by_table={t: len(ids) for t, ids in by_table.items()},
            expected_dim=ctx.dim,
            repairable=total,
            ids=by_table,
        )
    ]


def clear_wrong_widths(ctx: HealthContext, issues: list[Issue]) -> None:
    for i in issues:
        if isinstance(i, EmbeddingDimension):
            i.fixed = sum(null_embeddings(ctx.write_handle, t, ids) for t, ids in i.ids.items())
            i.nulled = {t: ids for t, ids in i.ids.items() if ids}


@finding("nonfinite_embedding", "warn")
class NonfiniteEmbedding(Reembedded, Planned[int]):
    """One table's vectors holding NaN or infinity: the plan is their rows, cleared."""

    table: str
    count: int


def nonfinite_embedding(ctx: HealthContext) -> list[NonfiniteEmbedding]:
    import numpy as np  # on first use: see docs/notes/performance-notes.md, "Start-up"

    out = []
    for table in TABLES:
        bad: list[int] = []
        for batch in iter_embeddings(ctx.c, table, ctx.agent_id):
            for row_id, blob in batch:
                if len(blob) % 4 == 0 and not np.all(np.isfinite(np.frombuffer(blob, "<f4"))):
                    bad.append(row_id)
        if bad:
            out.append(
                NonfiniteEmbedding(table=table, count=len(bad), repairable=len(bad), plan=bad)
            )
    return out


def clear_nonfinite(ctx: HealthContext, issues: list[NonfiniteEmbedding]) -> None:
    for i in issues:
        i.fixed = null_embeddings(ctx.write_handle, i.table, i.plan)
        i.nulled = {i.table: i.plan}


@finding("embedding_backend")
class BackendIssue(Issue):
    """A finding of the embedding_backend check."""


@finding(severity="warn")
class BackendFault(BackendIssue):
    """The backend failed: as recall last saw it (`source` recall) or the fix run's probe."""

    evidence: str | None
    source: str


@finding(severity="info", type_name="embedding_backend_not_probed")
class BackendNotProbed(BackendIssue):
    hint: str = "liveness is tested by check_health(fix=true)"


def embedding_backend(ctx: HealthContext) -> list[Issue]:
    if ctx.embedder is None:
        return skipped("embedding_backend", "no embedding backend is configured")
    health = ctx.embedding_health
    if health is not None and health.state == "fault":
        kind = health.kind or "unreachable"
        return [
            BackendFault(
                type=f"embedding_backend_{kind}", evidence=health.evidence, source="recall"
            )
        ]
    if ctx.probe.ran:
        if ctx.probe.error is None:
            return []
        kind = "misconfigured" if ctx.probe.misconfigured else "unreachable"
        return [
            BackendFault(type=f"embedding_backend_{kind}", evidence=ctx.probe.error, source="probe")
        ]
    return [BackendNotProbed()]


@finding()
class NullEmbedding(Issue):
    """Rows without a vector (`null_embedding`: memories, `null_episode_embedding`)."""

    repairable: int
    count: int
    total: int
    hint: str = UNSET
    re_embedded: int = UNSET
    fixed: int | bool = UNSET
    remaining: int = UNSET
    fix_error: str = UNSET


def _null_check(ctx: HealthContext, check: str, table: str) -> list[NullEmbedding]:
    missing = missing_embeddings(ctx.c, table, ctx.agent_id)
    if not missing:
        return []
    total = count(ctx.c, table, ctx.agent_id)
    stored = ctx.stores_blobs or table == "episodes"
    if ctx.embedder is None or not stored:
        hint = (
            "no embedding backend is configured: these rows are found by "
            "full-text and keyword search only"
            if ctx.embedder is None
            else "local vectors are not stored (remote vector mode without CPERSONA_STORE_BLOB)"
        )
        return [
            NullEmbedding(
                type=check,
                severity="info",
                check=check,
                repairable=0,
                count=missing,
                total=total,
                hint=hint,
            )
        ]
    return [
        NullEmbedding(
            type=check,
            severity="critical" if missing * 2 > total else "warn",
            check=check,
            repairable=min(missing, ctx.settings.reembed_row_cap),
            count=missing,
            total=total,
        )
    ]


def _embed_ahead(table: str) -> Callable[[HealthContext], None]:
    """The vectors of `table`'s rows without one, computed before the write lock."""

    def prepare(ctx: HealthContext) -> None:
        if table == "memories" and not ctx.stores_blobs:
            return
        if not ctx.takes_configured_vectors(table):
            return  # another model's vectors: `cpersona reembed` fills these rows
        rows = texts_to_embed(reading(ctx.db), table, ctx.agent_id, ctx.reembed_budget)
        blobs, error = ctx.try_embed([text for _, text in rows])
        # `blobs` is empty when the backend failed: nothing is prepared then.
        pairs = zip(rows, blobs, strict=False)
        ctx.reembeds[table] = Reembed([(i, b) for (i, _), b in pairs if b is not None], error)
        ctx.reembed_budget -= len(ctx.reembeds[table].vectors)

    return prepare


def _write_ahead(table: str) -> Callable[[HealthContext, list[NullEmbedding]], None]:
    def repair(ctx: HealthContext, issues: list[NullEmbedding]) -> None:
        prepared = ctx.reembeds.get(table, Reembed([]))
        written = set_embeddings(ctx.write_handle, table, prepared.vectors)
        for i in issues:
            i.re_embedded = written
            i.fixed = written
            i.remaining = max(0, i.count - written)
            if prepared.error:
                i.fix_error = prepared.error

    return repair


def _null_embedding_check(name: str, table: str) -> Check[NullEmbedding]:
    """Rows of `table` without a vector, filled by vectors computed before the write lock."""
    return Check(
        name,
        "warn",
        lambda ctx: _null_check(ctx, name, table),
        (NullEmbedding,),
        EVERYWHERE,
        repair=_write_ahead(table),
        prepare=_embed_ahead(table),
    )


CHECKS: tuple[Check[Any], ...] = (
    Check(
        "embedding_dimension",
        "critical",
        embedding_dimension,
        (EmbeddingDimension, Skipped),
        EVERYWHERE,
        repair=clear_wrong_widths,
    ),
    Check(
        "nonfinite_embedding",
        "warn",
        nonfinite_embedding,
        (NonfiniteEmbedding,),
        EVERYWHERE,
        repair=clear_nonfinite,
    ),
    Check(
        "embedding_backend",
        "info",
        embedding_backend,
        (BackendFault, BackendNotProbed, Skipped),
        EVERYWHERE,
    ),
    _null_embedding_check("null_embedding", "memories"),
    _null_embedding_check("null_episode_embedding", "episodes"),
)
