"""A recall scope (storage/scan_request.py) as the index files' kernels take it: the agent,
project, channel and source values as scope hashes, and the range as the kernels' keywords.

Both index kinds (vector files, vectors/search.py; full-text files, fts/search.py) filter by
the same hashes, so the source prefix is resolved to the matching source ids, and the axes
hashed, here once rather than in each arm.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from cpersona.derived.scope import scope_hash
from cpersona.storage import Store
from cpersona.storage import embeddings as vector_sql
from cpersona.storage.scan_request import Scope

#: An empty filter: every value passes.
ANY = np.empty(0, dtype=np.uint64)


def hashes(values: list[str]) -> np.ndarray:
    return np.array([scope_hash(v) for v in values], dtype=np.uint64)


@dataclass(frozen=True, slots=True)
class KernelScope:
    """The keyword arguments of a kernel's scan or search that say which rows are in scope."""

    agent: int
    projects: np.ndarray
    channels: np.ndarray
    sources: np.ndarray
    span: dict[str, int]

    @classmethod
    def of(cls, db: Store, table: str, scope: Scope) -> KernelScope | None:
        """`scope` for `table`'s index; None when a source prefix matches no stored source (no
        row can be in scope: the answer is empty without a scan). The prefix is resolved in
        `db`, so in the caller's snapshot."""
        sources = ANY
        if scope.source_prefix:
            ids = vector_sql.source_ids_with_prefix(db, table, scope.agent_id, scope.source_prefix)
            if not ids:
                return None
            sources = hashes(ids)
        project = scope.project.value
        projects = ANY if project is None else hashes([""] if project == "" else [project, ""])
        channels = hashes([scope.channel, ""]) if scope.channel else ANY
        span = {} if scope.span is None else scope.span.kernel_args()
        return cls(scope_hash(scope.agent_id), projects, channels, sources, span)
