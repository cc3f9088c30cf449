"""The FTS arms from the full-text index: the same rows, order and bm25 values as FTS5's
`ORDER BY bm25(...), id LIMIT n` over the scope (retrieval.md §4.6-4.7), or None when the
index cannot answer and the caller runs the FTS5 statement instead."""

from __future__ import annotations

import logging

import numpy as np

from cpersona.derived.scope import scope_hash
from cpersona.errors import StoreCorrupt
from cpersona.fts.index import FtsIndex
from cpersona.storage import embeddings as vector_sql
from cpersona.storage.search import ScopeSql

log = logging.getLogger("cpersona.fts")

_ANY = np.empty(0, dtype=np.uint64)


def _hashes(values: list[str]) -> np.ndarray:
    return np.array([scope_hash(v) for v in values], dtype=np.uint64)


def ranked(
    index: FtsIndex, terms: list[str], scope: ScopeSql, source_prefix: str, limit: int
) -> list[tuple[int, float]] | None:
    """(row id, bm25) of the top `limit` rows in scope (and in `scope.span`, when a range is
    given) matching any of `terms`, best first."""
    if any("\x00" in t for t in terms):
        # FTS5 rejects a NUL inside a phrase ("unterminated string"); its error path is the
        # behaviour to keep, so that query goes to FTS5.
        return None
    sources = _ANY
    if source_prefix:
        ids = vector_sql.source_ids_with_prefix(
            index.db, index.table, scope.agent_id, source_prefix
        )
        if not ids:
            return []
        sources = _hashes(ids)
    project = scope.project.value
    projects = _ANY if project is None else _hashes([""] if project == "" else [project, ""])
    channels = _hashes([scope.channel, ""]) if scope.channel else _ANY
    if index.healing:  # said once when the damage was found; FTS5 answers meanwhile
        return None
    try:
        core = index.current()
        if core is None:
            return None
        span = {} if scope.span is None else scope.span.kernel_args()
        ids_out, scores = core.search(
            terms, scope_hash(scope.agent_id), projects, channels, sources, limit, **span
        )
    except (OSError, StoreCorrupt) as exc:
        # On SQLite FTS5 gives the same answer; on PostgreSQL the arm's error path answers.
        log.warning("full-text index %s unusable for this search: %s", index.path.name, exc)
        return None
    return list(zip(ids_out.tolist(), scores.tolist(), strict=True))
