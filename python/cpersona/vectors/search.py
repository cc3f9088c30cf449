"""The scoped vector scan of one table: the index fast path, else the database's own path: the
chunked SQLite scan, or on PostgreSQL one statement there (storage/database_scan.py), which is
also the whole arm of a store whose vector arm runs in the database (no local index).

Every path computes the same thing (retrieval.md §4.2-4.3): the in-scope embedded rows
ordered by (created_at DESC, id DESC), positions [0, window) scored into the near list and
[window, reach) into the far list, each thresholded and cut to its k by (score DESC, position
ASC). A time-scoped scan (`Scope.span`) gives positions only to rows whose instant is in the
range (cpersona.timerange), so a range in the past has a whole window of its own. The result
never depends on which path ran.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from types import ModuleType

import numpy as np

from cpersona import _backend
from cpersona.derived.kernel_scope import KernelScope
from cpersona.errors import AheadOfSnapshot, StoreCorrupt
from cpersona.storage import Store, database_scan
from cpersona.storage import embeddings as vector_sql
from cpersona.storage.scan_request import ScanLimits, Scope
from cpersona.vectors.index import VectorIndex

log = logging.getLogger("cpersona.vectors")

_NONE_I = np.empty(0, dtype=np.int64)
_NONE_F = np.empty(0, dtype=np.float32)


@dataclass(frozen=True, slots=True)
class Hits:
    """Row ids and scores, best first, of the near window and the far region."""

    near_ids: np.ndarray
    near_scores: np.ndarray
    far_ids: np.ndarray
    far_scores: np.ndarray

    @classmethod
    def empty(cls) -> Hits:
        return cls(_NONE_I, _NONE_F, _NONE_I, _NONE_F)


def scan_table(
    db: Store,
    table: str,
    index: VectorIndex | None,
    query: np.ndarray,
    scope: Scope,
    limits: ScanLimits,
    *,
    chunk_rows: int = 512,
    kernels: ModuleType | None = None,
) -> Hits:
    """Scan `table` the way this database can: through `index` unless its capabilities say
    the vector arm runs in the database, else (and with no `index`) the database's own path,
    the same answer as the index file's: one statement on a store that scans vectors itself
    (PostgreSQL's pgvector), else the chunked BLOB scan. `kernels`: from `_backend.load`
    (None: CPERSONA_KERNEL's)."""
    if index is not None and db.capabilities.vector_arm != "database":
        return scan(index, query, scope, limits, chunk_rows=chunk_rows, kernels=kernels)
    if database_scan.available(db):
        return scan_database(db, table, query, scope, limits)
    return scan_sqlite(db, table, query, scope, limits, chunk_rows=chunk_rows, kernels=kernels)


def scan_database(
    db: Store, table: str, query: np.ndarray, scope: Scope, limits: ScanLimits
) -> Hits:
    """The window scan as one statement in the database (on PostgreSQL pgvector's inner
    product, exact)."""
    query = np.ascontiguousarray(query, dtype="<f4").reshape(-1)
    found = database_scan.window_scan(db, table, query.tobytes(), scope, limits)

    def arrays(hits: list[tuple[int, float]]) -> tuple[np.ndarray, np.ndarray]:
        return (
            np.array([i for i, _ in hits], dtype=np.int64),
            np.array([s for _, s in hits], dtype=np.float32),
        )

    near_ids, near_scores = arrays(found.near)
    far_ids, far_scores = arrays(found.far)
    return Hits(near_ids, near_scores, far_ids, far_scores)


def scan(
    index: VectorIndex,
    query: np.ndarray,
    scope: Scope,
    limits: ScanLimits,
    *,
    chunk_rows: int = 512,
    kernels: ModuleType | None = None,
) -> Hits:
    """Scan one table for `query` within `scope` (see the module docstring): the index file,
    else the database's own path."""
    kernels = _backend.from_environment() if kernels is None else kernels
    hits = scan_file(index, kernels, query, scope, limits, chunk_rows)
    if hits is not None:
        return hits
    return scan_table(
        index.db, index.table, None, query, scope, limits, chunk_rows=chunk_rows, kernels=kernels
    )


def scan_file(
    index: VectorIndex,
    kernels: ModuleType,
    query: np.ndarray,
    scope: Scope,
    limits: ScanLimits,
    chunk_rows: int,
) -> Hits | None:
    """The scan through the index file with `kernels` (from `_backend.load`); None when the
    file cannot answer (being rebuilt, ahead of the snapshot, damaged, unusable, or of another
    dimension): the database will."""
    query = np.ascontiguousarray(query, dtype=np.float32).reshape(-1)
    where = KernelScope.of(index.db, index.table, scope)
    if where is None:
        return Hits.empty()
    # A file found damaged is being rebuilt in the background: the database answers
    # meanwhile, and the call does not wait for the rebuild.
    if index.healing:
        return None
    return _scan_file(kernels, index, query, where, limits, chunk_rows)


def _scan_file(
    kernels: ModuleType,
    index: VectorIndex,
    query: np.ndarray,
    where: KernelScope,
    limits: ScanLimits,
    chunk_rows: int,
) -> Hits | None:
    def scanned() -> Hits | None:
        handle, sums = index.kernel_handle(kernels.VectorIndex.open)
        if handle.count == 0:  # a current file without a row: none is embedded
            return Hits.empty()
        if handle.dim != query.shape[0]:
            return None
        near_ids, near_scores, far_ids, far_scores = handle.scan(
            query,
            where.agent,
            where.projects,
            where.channels,
            where.sources,
            limits.window,
            limits.reach,
            float(limits.threshold),
            limits.k,
            limits.far_k,
            chunk_rows,
            sums=sums,
            **where.span,
        )
        return Hits(near_ids, near_scores, far_ids, far_scores)

    try:
        if index.db.snapshot_opening():
            # The snapshot's BEGIN is on its way (PostgreSQL): scan the file as it is during the
            # round trip, and keep the answer if the file holds what the snapshot sees, which
            # after this host's own write is the common case; else follow the log and rescan.
            with index.reading_as_is() as applied:
                early = None if applied is None else scanned()
            if applied is not None and index.current_at(applied):
                return early
        with index.reading() as path:
            if path is None:  # rebuilt in the background: SQLite answers meanwhile
                return None
            return scanned()
    except AheadOfSnapshot:
        # Another writer's sync moved the file past this recall's snapshot: the snapshot's
        # own rows answer, so every arm of the recall reads the same state.
        return None
    except StoreCorrupt as exc:
        # Bytes that disagree with what was written (a slot's checksum, or a check at open)
        # are never answered from; the file is rebuilt in the background.
        index.heal_in_background(str(exc))
    except OSError as exc:
        # The index is optional: a file that cannot be written or locked (disk full, read-only
        # directory) never fails a scan; the SQLite window gives the same answer.
        log.warning("vector index %s unusable, scanning SQLite: %s", index.path.name, exc)
    return None


def scan_sqlite(
    db: Store,
    table: str,
    query: np.ndarray,
    scope: Scope,
    limits: ScanLimits,
    *,
    chunk_rows: int = 512,
    kernels: ModuleType | None = None,
) -> Hits:
    """The no-index path: the window's ids in order from SQLite, then their BLOBs `chunk_rows`
    at a time, each chunk scored and cut to its top k, all in one read transaction. Memory is
    O(rows + chunk_rows x dim), never O(rows x dim).

    Rows whose BLOB is not `len(query)` floats take a position and are never scored.
    """
    kernels = _backend.from_environment() if kernels is None else kernels
    query = np.ascontiguousarray(query, dtype=np.float32).reshape(-1)
    window = limits.window
    with vector_sql.snapshot(db):
        ids = vector_sql.window_ids(db, table, scope, limits.positions)
        threshold = limits.threshold
        near = _score_region(
            kernels, db, table, ids[:window], 0, query, threshold, limits.k, chunk_rows
        )
        far = (
            _score_region(
                kernels, db, table, ids[window:], window, query, threshold, limits.far_k, chunk_rows
            )
            if limits.has_far
            else (_NONE_I, _NONE_F)
        )
    return Hits(near[0], near[1], far[0], far[1])


def _score_region(
    kernels: ModuleType,
    db: Store,
    table: str,
    ids: list[int],
    base: int,
    query: np.ndarray,
    threshold: float,
    k: int,
    chunk_rows: int,
) -> tuple[np.ndarray, np.ndarray]:
    dim = query.shape[0]
    pos_parts, score_parts = [], []
    for start in range(0, len(ids), chunk_rows):
        chunk = ids[start : start + chunk_rows]
        found = vector_sql.blobs(db, table, chunk)
        keep = [
            (base + start + i, blob)
            for i, row_id in enumerate(chunk)
            if len(blob := found.get(row_id, b"")) == 4 * dim
        ]
        if not keep:
            continue
        block = np.frombuffer(b"".join(b for _, b in keep), dtype="<f4").reshape(len(keep), dim)
        local, scores = kernels.scan_chunk(
            np.ascontiguousarray(block, dtype=np.float32), query, float(threshold), k, 0
        )
        positions = np.array([keep[int(i)][0] for i in local], dtype=np.int64)
        pos_parts.append(positions)
        score_parts.append(scores)
    if not pos_parts:
        return _NONE_I, _NONE_F
    positions, scores = kernels.merge_top_k(
        np.concatenate(pos_parts), np.concatenate(score_parts).astype(np.float32), k
    )
    out = np.array([ids[int(p) - base] for p in positions], dtype=np.int64)
    return out, scores
