"""Helpers of the vector-index tests: a small-integer embedder, an independent reference scan,
and comparisons of `scan` (the index), `scan_sqlite` (the SQL window) and the reference.

The reference reads every row with plain SQL and applies retrieval.md §4.0/§4.2/§4.3 in Python:
scope, `ORDER BY created_at DESC, id DESC` on the stored text (every stamp the tests write is
canonical `YYYY-MM-DD HH:MM:SS`), window / far positions, `score >= threshold`, top k by
(score DESC, position ASC). With small-integer vectors every dot product is exact in float32, so
all three answers must be bit-identical, tie-breaks included (STYLE.md §8).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np
from cpersona.config import Settings
from cpersona.embedding.base import BatchEmbedder
from cpersona.embedding.hashing import HashingProvider
from cpersona.engine import Engine
from cpersona.models import ProjectFilter
from cpersona.storage import Database
from cpersona.storage.scan_request import ScanLimits
from cpersona.timerange import row_time
from cpersona.vectors.search import Hits, Scope, scan, scan_sqlite

TABLES = ("memories", "episodes")


class IntEmbedder(BatchEmbedder):
    """Deterministic vectors with entries in {-2, ..., 2}: every dot product is exact.

    A text starting with "zero" embeds to the all-zero vector (scores 0 against anything).
    """

    def __init__(self, dim: int = 7) -> None:
        self._dim = dim
        self.name = f"int:{dim}"

    def dim(self) -> int:
        return self._dim

    def _embed_batch(self, batch: list[str], kind: str) -> np.ndarray:
        return np.stack([int_vector(t, self._dim) for t in batch])


def int_vector(text: str, dim: int) -> np.ndarray:
    if text.startswith("zero"):
        return np.zeros(dim, dtype=np.float32)
    digest = hashlib.blake2b(text.encode(), digest_size=max(dim, 16)).digest()
    return np.array([b % 5 - 2 for b in digest[:dim]], dtype=np.float32)


def blob(vector: Sequence[float] | np.ndarray) -> bytes:
    return np.asarray(vector, dtype="<f4").tobytes()


def new_engine(db_path: Any, embedder: Any = None) -> Engine:
    """An Engine on a file database; the hashing embedder unless told otherwise."""
    settings = Settings(db_path=str(db_path), embedding_mode="hashing")
    return Engine(settings, embedder=embedder or HashingProvider())


# -- the reference --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Probe:
    """One scan request: a table, a query, a scope and the window parameters."""

    table: str
    query: np.ndarray
    scope: Scope
    window: int
    reach: int
    threshold: float
    k: int
    far_k: int
    chunk_rows: int = 512

    @property
    def limits(self) -> ScanLimits:
        return ScanLimits(self.window, self.reach, self.threshold, self.k, self.far_k)

    def __repr__(self) -> str:  # short enough to read in a falsifying example
        s = self.scope
        q = (
            self.query.tolist()
            if self.query.shape[0] <= 16
            else (
                f"<{self.query.shape[0]} floats, blake2b "
                f"{hashlib.blake2b(self.query.tobytes(), digest_size=4).hexdigest()}>"
            )
        )
        return (
            f"Probe({self.table}, q={q}, agent={s.agent_id!r}, "
            f"project={s.project.value!r}, channel={s.channel!r}, source={s.source_prefix!r}, "
            f"span={s.span}, window={self.window}, reach={self.reach}, "
            f"threshold={self.threshold}, "
            f"k={self.k}, far_k={self.far_k}, chunk_rows={self.chunk_rows})"
        )


def source_id(source: str | None) -> str | None:
    """`CAST(json_extract(source, '$.id') AS TEXT)` for the shapes the tests write."""
    if source is None:
        return None
    try:
        value = json.loads(source)
    except ValueError:
        return None
    if not isinstance(value, dict) or "id" not in value:
        return None
    sid = value["id"]
    if isinstance(sid, bool) or sid is None:
        raise AssertionError(f"the reference does not model source id {sid!r}")
    if isinstance(sid, (str, int)):
        return str(sid)
    raise AssertionError(f"the reference does not model source id {sid!r}")


def _in_scope(row: Any, scope: Scope, table: str) -> bool:
    if row["agent_id"] != scope.agent_id:
        return False
    project = scope.project.value
    if project is not None and row["project_id"] not in {project, ""}:
        return False
    if scope.channel and row["channel"] not in {scope.channel, ""}:
        return False
    if scope.source_prefix:
        sid = source_id(row["source"]) if table == "memories" else None
        if sid is None or not sid.startswith(scope.source_prefix):
            return False
    return True


def reference(db: Database, probe: Probe) -> Hits:
    table = probe.table
    source = "source" if table == "memories" else "NULL AS source"
    stamp = "timestamp" if table == "memories" else "start_time"
    rows = db.query(
        f"SELECT id, agent_id, project_id, channel, {source}, created_at, embedding, "
        f"{stamp} AS stamp FROM {table}"
    )
    span = probe.scope.span
    window = [
        r
        for r in rows
        if r["embedding"] is not None
        and _in_scope(r, probe.scope, table)
        and (span is None or span.admits(row_time(r["stamp"], r["created_at"])))
    ]
    window.sort(key=lambda r: (r["created_at"], r["id"]), reverse=True)
    query = probe.query.astype(np.float64)

    def region(lo: int, hi: int, k: int) -> tuple[np.ndarray, np.ndarray]:
        found = []
        for pos in range(lo, min(hi, len(window))):
            raw = bytes(window[pos]["embedding"])
            if len(raw) != 4 * query.shape[0]:
                continue
            score = float(np.frombuffer(raw, dtype="<f4").astype(np.float64) @ query)
            if score >= probe.threshold:
                found.append((-score, pos, int(window[pos]["id"])))
        found.sort()
        found = found[:k]
        return (
            np.array([f[2] for f in found], dtype=np.int64),
            np.array([-f[0] for f in found], dtype=np.float32),
        )

    near = region(0, probe.window, probe.k)
    far = (
        region(probe.window, probe.reach, probe.far_k)
        if probe.reach > probe.window
        else (np.empty(0, np.int64), np.empty(0, np.float32))
    )
    return Hits(near[0], near[1], far[0], far[1])


def as_lists(hits: Hits) -> tuple[list[int], list[float], list[int], list[float]]:
    return (
        [int(i) for i in hits.near_ids],
        [float(s) for s in np.asarray(hits.near_scores, dtype=np.float32)],
        [int(i) for i in hits.far_ids],
        [float(s) for s in np.asarray(hits.far_scores, dtype=np.float32)],
    )


def check_probe(
    db: Database,
    indexes: dict[str, Any],
    probe: Probe,
    *,
    exact_ref: bool = True,
    kernels: ModuleType | None = None,
) -> None:
    """scan (index) == scan_sqlite (SQL window) [== reference], ids, order and scores, on
    `kernels` (None: those CPERSONA_KERNEL names)."""
    index = indexes[probe.table]
    kw = {"chunk_rows": probe.chunk_rows, "kernels": kernels}
    fast = as_lists(scan(index, probe.query, probe.scope, probe.limits, **kw))
    sql = as_lists(scan_sqlite(db, probe.table, probe.query, probe.scope, probe.limits, **kw))
    assert fast == sql, f"index scan != SQLite scan for {probe!r}"
    if exact_ref:
        ref = as_lists(reference(db, probe))
        assert sql == ref, f"SQLite scan != reference for {probe!r}"


def scope(agent: str, project: str | None = None, channel: str = "", source: str = "") -> Scope:
    return Scope(agent, ProjectFilter(project), channel, source)


def header_field(path: Any, offset: int, size: int) -> int:
    with open(path, "rb") as f:
        f.seek(offset)
        return int.from_bytes(f.read(size), "little")
