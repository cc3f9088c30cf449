"""The vector arm (retrieval.md §4.2-4.5) as channels: the near and far lists of the local scan
over both tables, or the remote service's list.

The local scan of one table has three backends, one chosen per table when the recaller is
built (retrieval/channels.py): the index file (`VectorFile`), pgvector's statement
(`PgVector`), and SQLite's chunked BLOB scan (`ChunkedScan`); the file's fallback while it
cannot answer is the database's backend, through `Fallback`. Every backend computes the same
lists (vectors/search.py).
"""

from __future__ import annotations

import logging
from dataclasses import replace
from types import ModuleType

import numpy as np

from cpersona.retrieval.candidates import merged_vector_list
from cpersona.retrieval.channel import Backend, RankedList
from cpersona.retrieval.hydration import Hydration, Ranked
from cpersona.retrieval.recall_query import RecallQuery
from cpersona.storage import Store
from cpersona.storage.error_kinds import StorageError, UnreachableError
from cpersona.storage.scan_request import Scope
from cpersona.timings import stage
from cpersona.vectors.index import VectorIndex
from cpersona.vectors.search import Hits, scan_database, scan_file, scan_sqlite

log = logging.getLogger("cpersona.recall")

TABLES = (("memories", "mem"), ("episodes", "ep"))


def table_scope(query: RecallQuery, table: str) -> Scope:
    """The query's scope for `table`: episodes have no source, so no source prefix."""
    scope = query.scope
    if table == "memories" or not scope.source_prefix:
        return scope
    return replace(scope, source_prefix="")


class VectorFile:
    """The index file's scan (vectors/search.py `scan_file`); None while it cannot answer."""

    def __init__(self, index: VectorIndex, kernels: ModuleType, chunk_rows: int) -> None:
        self.index, self.kernels, self.chunk_rows = index, kernels, chunk_rows

    def answer(self, query: RecallQuery, reads: Hydration, table: str) -> Hits | None:
        assert query.vector is not None
        scope = table_scope(query, table)
        vector = query.vector.vector
        return scan_file(self.index, self.kernels, vector, scope, query.scan, self.chunk_rows)


class PgVector:
    """One statement in the database (pgvector's exact inner product)."""

    def __init__(self, db: Store) -> None:
        self.db = db

    def answer(self, query: RecallQuery, reads: Hydration, table: str) -> Hits:
        assert query.vector is not None
        return scan_database(
            self.db, table, query.vector.vector, table_scope(query, table), query.scan
        )


class ChunkedScan:
    """SQLite's window ids, then their BLOBs scored a chunk at a time."""

    def __init__(self, db: Store, kernels: ModuleType, chunk_rows: int) -> None:
        self.db, self.kernels, self.chunk_rows = db, kernels, chunk_rows

    def answer(self, query: RecallQuery, reads: Hydration, table: str) -> Hits:
        assert query.vector is not None
        return scan_sqlite(
            self.db,
            table,
            query.vector.vector,
            table_scope(query, table),
            query.scan,
            chunk_rows=self.chunk_rows,
            kernels=self.kernels,
        )


def _pairs(ids: np.ndarray, scores: np.ndarray) -> list[tuple[int, float]]:
    return list(zip(ids.tolist(), scores.tolist(), strict=True))


def near_and_far(near: list[Ranked], far: list[Ranked]) -> list[RankedList]:
    """The vector arm's two lists: the near list keeps its rows' objects in fusion first (they
    carry the cosine), the far list last (a far vote only adds, §19.2)."""
    return [
        RankedList("near", pending=near, score="cosine", keeps_row=0, ties=1),
        RankedList("far", pending=far, score="cosine", keeps_row=2, ties=1),
    ]


class VectorChannel:
    """The local scan of both tables (§4.2-4.3): the near and far lists, their rows read with
    the next read of their table (hydration.py)."""

    stage = "vector_scan"

    def __init__(self, scans: dict[str, Backend[Hits]]) -> None:
        self.scans = scans

    def rank(self, query: RecallQuery, reads: Hydration) -> list[RankedList]:
        vector = query.vector
        if vector is None or query.blank or query.limit <= 0 or query.remote is not None:
            return near_and_far([], [])
        per_table: dict[str, tuple[list[tuple[int, float]], list[tuple[int, float]]]] = {}
        with stage(self.stage):
            for table, _ in TABLES:
                hits = None
                if table in vector.tables and (table == "memories" or query.episodes):
                    hits = self.scans[table].answer(query, reads, table)
                hits = Hits.empty() if hits is None else hits
                per_table[table] = (
                    _pairs(hits.near_ids, hits.near_scores),
                    _pairs(hits.far_ids, hits.far_scores),
                )
        near = merged_vector_list(per_table["memories"][0], per_table["episodes"][0], query.limit)
        far = merged_vector_list(
            per_table["memories"][1], per_table["episodes"][1], query.scan.far_k
        )
        near_ids = {(k, i) for k, i, _ in near}
        overlap = [(k, i, sc) for k, i, sc in far if (k, i) in near_ids]
        if overlap:
            log.warning("far list overlapped the near list (%d rows); dropped", len(overlap))
            far = [(k, i, sc) for k, i, sc in far if (k, i) not in near_ids]
        reads.expect(near + far)
        return near_and_far(near, far)


class RemoteFirst:
    """The remote service's list as the near list when the query has one (§4.5: authoritative,
    no local scan), else `local`'s lists."""

    stage = "vector_scan"  # timed only when the local scan runs

    def __init__(self, local: VectorChannel) -> None:
        self.local = local

    def rank(self, query: RecallQuery, reads: Hydration) -> list[RankedList]:
        if query.remote is None:
            return self.local.rank(query, reads)
        return near_and_far(remote_ranked(query), [])


def remote_ranked(query: RecallQuery) -> list[Ranked]:
    hits = query.remote or ()
    return [(h.kind, h.row_id, h.score) for h in hits if h.kind == "mem" or query.episodes]


def remote_readable(query: RecallQuery, reads: Hydration) -> bool:
    """Whether the remote list's rows can be read (they are, and kept for its hydration);
    False: the local scan runs instead (an unreachable database still refuses the call)."""
    try:
        reads.candidates(remote_ranked(query))
    except UnreachableError:
        raise
    except StorageError as exc:
        log.warning("remote vector hits could not be read (%s); using the local scan", exc)
        return False
    return True
