"""The FTS arms from the full-text index: the same rows, order and bm25 values as FTS5's
`ORDER BY bm25(...), id LIMIT n` over the scope (retrieval.md §4.6-4.7), or None when the
index cannot answer and the caller runs the FTS5 statement instead."""

from __future__ import annotations

import logging
from dataclasses import replace

from cpersona.derived.kernel_scope import KernelScope
from cpersona.errors import StoreCorrupt
from cpersona.fts.index import FtsIndex
from cpersona.storage.search import ScopeSql

log = logging.getLogger("cpersona.fts")


def ranked(
    index: FtsIndex, terms: list[str], scope: ScopeSql, source_prefix: str, limit: int
) -> list[tuple[int, float]] | None:
    """(row id, bm25) of the top `limit` rows in scope (and in `scope.span`, when a range is
    given) matching any of `terms`, best first."""
    if any("\x00" in t for t in terms):
        # FTS5 rejects a NUL inside a phrase ("unterminated string"); its error path is the
        # behaviour to keep, so that query goes to FTS5.
        return None
    if scope.source_prefix != source_prefix:  # (a copy costs microseconds per call)
        scope = replace(scope, source_prefix=source_prefix)
    where = KernelScope.of(index.db, index.table, scope)
    if where is None:
        return []
    if index.healing:  # said once when the damage was found; FTS5 answers meanwhile
        return None
    try:
        core = index.current()
        if core is None:
            return None
        ids_out, scores = core.search(
            terms, where.agent, where.projects, where.channels, where.sources, limit, **where.span
        )
    except (OSError, StoreCorrupt) as exc:
        # On SQLite FTS5 gives the same answer; on PostgreSQL the arm's error path answers.
        log.warning("full-text index %s unusable for this search: %s", index.path.name, exc)
        return None
    return list(zip(ids_out.tolist(), scores.tolist(), strict=True))
