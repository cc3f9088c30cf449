"""Check 33, `embedding_model`: are the stored vectors the configured model's? A conversion
begun or due (`cpersona reembed`), a width that is another model's, a sample of stored
vectors compared with fresh embeddings of their text, and the calibration's model label. The
repair clears the vectors another model made; the fix run's second pass writes them again."""

from __future__ import annotations

from typing import Any, ClassVar

from cpersona.health.check import EVERYWHERE, Check
from cpersona.health.checks.embeddings import TABLES
from cpersona.health.context import HealthContext, ModelProbe
from cpersona.health.issue import UNSET, Issue, Reembedded, Skipped, finding, skipped
from cpersona.storage.upkeep.embedding_rows import (
    conversion_progress,
    has_vectors,
    iter_embeddings,
    null_all_embeddings,
    null_embeddings,
    open_conversions,
    recorded_models,
    texts_by_id,
    width_counts,
    wrong_width,
)

#: Stored vectors compared against a fresh embedding of the same text, per table: the newest
#: (where an import lands) and a few of the oldest. Bounded so that a report-only run with a
#: local model costs at most 2 x 32 embeddings (docs/reliability.md).
MODEL_PROBE_NEWEST = 24
MODEL_PROBE_OLDEST = 8
MODEL_PROBE_MIN_COSINE = 0.99


@finding("embedding_model")
class EmbeddingModelIssue(Issue):
    """A finding of the embedding_model check."""


@finding(severity="warn", type_name="embedding_model_width_mismatch")
class WidthMismatch(EmbeddingModelIssue, Reembedded):
    stored_width: int
    configured_width: int
    configured_model: str
    rows: int


#: The answer order of a finding whose hint stands between `repairable` and what the fix did.
_HINT_IN_TAIL = ("repairable", "hint", "fixed", "fix_error")


@finding(severity="warn", type_name="embedding_model_mismatch")
class ModelMismatch(EmbeddingModelIssue, Reembedded):
    configured_model: str
    stored_model: str | None
    sampled: int
    differing: int
    hint: str = (
        "vectors from another model make similarity meaningless; "
        "fix=true re-embeds them with the configured model"
    )
    _tail: ClassVar[tuple[str, ...]] = (*_HINT_IN_TAIL, "re_embedded")


@finding(severity="warn", type_name="embedding_model_foreign_rows")
class ForeignRows(EmbeddingModelIssue, Reembedded):
    configured_model: str
    sampled: int
    differing: int
    rows: dict[str, list[int]]
    hint: str = (
        "these rows' vectors are not the configured model's embedding of their "
        "text (imported from another model?), so recall compares them with nothing "
        "they mean; fix=true re-embeds them. The probe samples the newest and oldest "
        "rows: run the check again after the fix"
    )
    _tail: ClassVar[tuple[str, ...]] = (*_HINT_IN_TAIL, "re_embedded")


@finding(severity="info", type_name="embedding_model_label_stale")
class LabelStale(EmbeddingModelIssue):
    configured_model: str
    stored_model: str
    hint: str = "stored vectors match the configured model; calibrate_threshold records its name"


@finding()
class Advised(EmbeddingModelIssue):
    """A finding whose answer has the fix fields but no rows this check's repair counts
    (`repairable` null): the hint says what to do."""

    repairable: int | None = None
    hint: str
    fixed: int | bool = UNSET
    fix_error: str = UNSET
    _tail: ClassVar[tuple[str, ...]] = _HINT_IN_TAIL


@finding(severity="warn", type_name="embedding_model_changed")
class ModelChanged(Advised):
    configured_model: str
    stored_model: str
    hint: str = (
        "the calibration was measured on another model; "
        "check_health(fix=true) compares stored vectors with fresh ones "
        "and re-embeds them if they differ"
    )


@finding()
class Conversion(Advised):
    """A `cpersona reembed` conversion running (`reembed_running`) or stopped before it
    finished (`reembed_interrupted`)."""

    table: str
    stored_model: str | None
    target_model: str
    phase: str
    started_at: str
    rows_converted: int
    rows: int


@finding(severity="warn", type_name="embedding_model_conversion_pending")
class ConversionPending(Advised):
    configured_model: str
    stored_model: dict[str, str]


def embedding_model(ctx: HealthContext) -> list[Issue]:
    if ctx.embedder is None:
        return skipped("embedding_model", "no embedding backend is configured")
    configured = ctx.embedder.name
    conversion = _conversion(ctx, configured)
    if conversion:
        # The stored vectors are recorded as another model's: recall serves them with that
        # model (or without vectors) and `cpersona reembed` converts them; no probe or fix
        # here may write vectors of the configured model among them.
        return conversion
    widths: dict[int, int] = {}
    for table in TABLES:
        for width, n in width_counts(ctx.c, table, ctx.agent_id).items():
            widths[width] = widths.get(width, 0) + n
    embedded = sum(widths.values())
    if not embedded:
        return []
    modal = max(widths, key=lambda w: (widths[w], w))
    if ctx.dim is not None and modal != ctx.dim:
        return [
            WidthMismatch(
                stored_width=modal,
                configured_width=ctx.dim,
                configured_model=configured,
                rows=embedded - widths.get(ctx.dim, 0),
                repairable=embedded - widths.get(ctx.dim, 0),
            )
        ]
    stored = ctx.sidecar.load().payload if ctx.sidecar is not None else None
    label = stored.embedding_model if stored is not None else ""
    # A fix run probes before taking the write lock; that answer is used once.
    probe, ctx.model_probe = ctx.model_probe, None
    if probe is None and ctx.handle is None:  # never embed under the fix run's write lock
        # Report-only too (issue 21): with a local model the probe costs no request; the
        # stored vectors' width stands in for a provider that has not loaded yet.
        probe = probe_model(ctx, modal)
    # A model change moves every vector; a row or two whose text was edited behind the
    # server's back must not read as one, so the evidence is a majority of the sample.
    if probe is not None and probe.count * 2 > probe.sampled:
        return [
            ModelMismatch(
                configured_model=configured,
                stored_model=label or None,
                sampled=probe.sampled,
                differing=probe.count,
                repairable=embedded,
            )
        ]
    if probe is not None and probe.count:
        # Fewer than half: rows whose vectors came from elsewhere (an import of another
        # model's export, a 2.5.x server writing with another model), not a model change.
        return [
            ForeignRows(
                configured_model=configured,
                sampled=probe.sampled,
                differing=probe.count,
                rows=probe.differing,
                repairable=probe.count,
            )
        ]
    if label and label != configured:
        if probe is not None:
            return [LabelStale(configured_model=configured, stored_model=label)]
        return [ModelChanged(configured_model=configured, stored_model=label)]
    return []


def _conversion(ctx: HealthContext, configured: str) -> list[Issue]:
    """Findings about model conversions: one begun and not finished, or one that is due."""
    # The embedding package comes with numpy: imported on first use (docs/performance.md,
    # "Start-up").
    from cpersona.embedding.conversion_lock import running
    from cpersona.embedding.routing import REEMBED_COMMAND

    out: list[Issue] = []
    record = recorded_models(ctx.c)
    for table, conv in sorted(open_conversions(ctx.c).items()):
        done, total = conversion_progress(ctx.c, table)
        live = not ctx.db.is_memory and running(ctx.db.path)
        out.append(
            Conversion(
                type="reembed_running" if live else "reembed_interrupted",
                severity="info" if live else "warn",
                table=table,
                stored_model=record[table].model if table in record else None,
                target_model=conv.model,
                phase=conv.phase,
                started_at=conv.started_at,
                rows_converted=done,
                rows=total,
                hint=(
                    "a conversion is running; the old vectors serve until it switches over"
                    if live
                    else f"a conversion stopped before it finished; run `{REEMBED_COMMAND}` "
                    "again: it continues where it stopped (the old vectors serve meanwhile)"
                ),
            )
        )
    pending = {
        t: r.model
        for t, r in sorted(record.items())
        if r.model != configured and has_vectors(ctx.c, t)
    }
    if pending and not out:  # an open conversion is the finding that says what to do
        out.append(
            ConversionPending(
                configured_model=configured,
                stored_model=dict(pending),
                hint=f"the stored vectors are another model's; recall queries with that model "
                f"where it runs here, else uses full-text and keyword search only. "
                f"`{REEMBED_COMMAND}` converts them in place",
            )
        )
    return out


def probe_model(ctx: HealthContext, dim: int | None = None) -> ModelProbe | None:
    """Re-embed a bounded sample of stored memories and episodes of width `dim` (default: the
    provider's) and name the rows whose stored vector is not the configured model's
    embedding of their text.

    Runs only where it costs no network request (local providers) or in a fix run (before the
    write lock); None when it did not run.
    """
    import numpy as np  # on first use: see docs/performance.md, "Start-up"

    dim = ctx.dim or dim
    if ctx.embedder is None or dim is None or not (ctx.local_embedder or ctx.probe.ran):
        return None
    sampled = 0
    differing: dict[str, list[int]] = {t: [] for t in TABLES}
    for table in TABLES:
        sample: dict[int, bytes] = {}
        for newest, limit in ((True, MODEL_PROBE_NEWEST), (False, MODEL_PROBE_OLDEST)):
            taken = 0
            for batch in iter_embeddings(
                ctx.c, table, ctx.agent_id, batch=64, newest_first=newest, limit=256
            ):
                for i, b in batch:
                    if len(b) == dim * 4 and taken < limit and i not in sample:
                        sample[i], taken = b, taken + 1
                if taken >= limit:
                    break
        if not sample:
            continue
        texts = texts_by_id(ctx.c, table, list(sample))
        ids = [i for i in sample if texts.get(i)]
        fresh, error = ctx.try_embed([texts[i] for i in ids])
        if error is not None or len(fresh) != len(ids):
            return None
        for row_id, new in zip(ids, fresh, strict=True):
            if new is None:
                continue
            sampled += 1
            stored = np.frombuffer(sample[row_id], "<f4").astype(np.float64)
            fresh_row = np.frombuffer(new, "<f4").astype(np.float64)
            denom = float(np.linalg.norm(stored) * np.linalg.norm(fresh_row)) or 1.0
            if (
                stored.shape != fresh_row.shape
                or float(stored @ fresh_row) / denom < MODEL_PROBE_MIN_COSINE
            ):
                differing[table].append(row_id)
    if not sampled:
        return None
    return ModelProbe(sampled, {t: ids for t, ids in differing.items() if ids})


def _probe_ahead(ctx: HealthContext) -> None:
    ctx.model_probe = probe_model(ctx)


def clear_other_vectors(ctx: HealthContext, issues: list[Issue]) -> None:
    """NULL the vectors another model made; the second re-embed pass replaces them."""
    acted = [i for i in issues if isinstance(i, WidthMismatch | ModelMismatch | ForeignRows)]
    if not acted:
        return
    handle = ctx.write_handle
    nulled: dict[str, list[int]] = {}
    finding = acted[0]  # the detector reports one of these at most
    if isinstance(finding, ForeignRows):  # only the rows the probe found
        for table, ids in finding.rows.items():
            null_embeddings(handle, table, ids)
            nulled[table] = list(ids)
    else:
        for table in TABLES:
            if isinstance(finding, WidthMismatch) and ctx.dim is not None:
                ids = wrong_width(handle, table, ctx.dim * 4, ctx.agent_id)
                null_embeddings(handle, table, ids)
                nulled[table] = ids
            else:
                nulled[table] = [
                    i for batch in iter_embeddings(handle, table, ctx.agent_id) for i, _ in batch
                ]
                null_all_embeddings(handle, table, ctx.agent_id)
    for i in acted:
        i.fixed = sum(len(ids) for ids in nulled.values())
        i.nulled = nulled


CHECKS: tuple[Check[Any], ...] = (
    Check(
        "embedding_model",
        "warn",
        embedding_model,
        (
            WidthMismatch,
            ModelMismatch,
            ForeignRows,
            LabelStale,
            ModelChanged,
            Conversion,
            ConversionPending,
            Skipped,
        ),
        EVERYWHERE,
        repair=clear_other_vectors,
        prepare=_probe_ahead,
    ),
)
