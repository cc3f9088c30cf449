"""The stages after fusion (retrieval.md §6-7, §9, §11): the cosine backfill, the episode
penalty, confidence, the gate with its rescue, autocut and the limit cut; and the scope
statistics they read, cached for a TTL."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime
from types import ModuleType

import numpy as np

from cpersona.config import Settings
from cpersona.memory.text import parse_utc
from cpersona.retrieval import scoring
from cpersona.retrieval.candidates import Candidate
from cpersona.retrieval.recall_query import RecallQuery
from cpersona.retrieval.request import QueryVector, RecallResult
from cpersona.retrieval.scope_reads import ScopeReads, Stats
from cpersona.retrieval.thresholds import Thresholds
from cpersona.retrieval.trace import Trace, no_trace
from cpersona.storage import Store, search
from cpersona.storage.scan_request import Scope


class Scorer:
    """§6-11 over one database, with its cache of scope statistics (pool and span)."""

    def __init__(
        self, db: Store, settings: Settings, thresholds: Thresholds, kernels: ModuleType
    ) -> None:
        self.db = db
        self.s = settings
        self.thresholds = thresholds
        self.kernels = kernels
        self._stats: dict[tuple[str, str | None, str], tuple[float, Stats]] = {}
        self._stats_lock = threading.Lock()

    def invalidate_stats(self) -> None:
        """Own writes change pool counts at once (the TTL is for other processes' writes)."""
        with self._stats_lock:
            self._stats.clear()

    def cached_stats(self, scope: Scope) -> Stats | None:
        if not self.s.scope_stats_cache:
            return None
        key = (scope.agent_id, scope.project.value, scope.channel)
        with self._stats_lock:
            hit = self._stats.get(key)
        if hit is not None and time.monotonic() - hit[0] < self.s.scope_stats_ttl_seconds:
            return hit[1]
        return None

    def _scope_stats(self, scope: Scope, reads: ScopeReads) -> Stats:
        if (hit := self.cached_stats(scope)) is not None:
            return hit
        key = (scope.agent_id, scope.project.value, scope.channel)
        now = time.monotonic()
        # Capped: every pool of POOL_SATURATION rows or more gates alike (scoring.gate).
        stats = reads.stats(scoring.POOL_SATURATION)
        if self.s.scope_stats_cache:
            with self._stats_lock:
                if len(self._stats) >= 256:
                    self._stats.clear()
                self._stats[key] = (now, stats)
        return stats

    def _backfill(self, rows: list[Candidate], query: QueryVector | None) -> None:
        if query is None:
            return
        qvec = query.vector
        for table, kind in (("memories", "mem"), ("episodes", "ep")):
            if table not in query.tables:
                continue  # another model's vectors: their cosine would mean nothing
            need = [r for r in rows if r.kind == kind and r.cosine is None and r.id > 0]
            if not need:
                continue
            blobs = search.embeddings(self.db, table, [r.id for r in need])
            for row in need:
                blob = blobs.get(row.id)
                if blob is None or len(blob) != 4 * qvec.shape[0]:
                    continue
                vec = np.frombuffer(blob, dtype="<f4").reshape(1, -1)
                if not np.all(np.isfinite(vec)):
                    continue
                row.cosine = float(self.kernels.scan_dot(np.ascontiguousarray(vec), qvec)[0])
                row.backfilled = True

    def score(
        self, query: RecallQuery, rows: list[Candidate], reads: ScopeReads
    ) -> tuple[list[Candidate], int]:
        """§6 on the fused list: backfill, penalty, re-sort, confidence. Returns (rows, N_pool)."""
        s = self.s
        if s.confidence_enabled:
            self._backfill(rows, query.vector)
        boundary = parse_utc(reads.latest_episode_created())
        penalised = scoring.episode_penalty(rows, boundary, s)
        if penalised and not s.confidence_enabled:
            rows = scoring.penalty_resort(rows)
        pool, (t_min, t_max) = self._scope_stats(query.scope, reads)
        if s.confidence_enabled:
            now = datetime.now(UTC)
            span = scoring.scope_span(t_min, t_max, now)
            history = search.recall_history(self.db, [r.id for r in rows if r.kind == "mem"])
            for row in rows:
                hist = history.get(row.id, (0, None)) if row.kind == "mem" else (0, None)
                row.confidence, row.confidence_detail = scoring.confidence(
                    row, span, hist, query.deep, now, s
                )
            rows = sorted(rows, key=scoring.confidence_order)
        return rows, pool

    def gate_and_cut(
        self, query: RecallQuery, rows: list[Candidate], pool: int, trace: Trace = no_trace
    ) -> RecallResult:
        """§7 gate, §9 rescue, §11 autocut and the limit cut (`trace` told the first two's and
        autocut's rows)."""
        s = self.s
        agent = query.scope.agent_id
        fused_gate = self.thresholds.fused_gate(agent) if s.fused_gate_enabled else (None, None)
        kept = scoring.gate(rows, pool, query.deep, query.blank, fused_gate, s.rrf_k)
        fallback = False
        if not any(not r.is_profile for r in kept) and any(r.backfilled for r in rows):
            profile_kept = any(r.is_profile for r in kept)
            kept = [r for r in rows if r.backfilled or (r.is_profile and profile_kept)]
            fallback = True
        gate = {"value": fused_gate[0], "signal": fused_gate[1]}
        facts = {"pool": pool, "deep": query.deep, "fused_gate": gate, "fallback": fallback}
        trace("admission", kept, facts)
        if not fallback:
            kept = scoring.autocut(kept, s)
        trace("autocut", kept)
        if query.fused and not s.confidence_enabled:  # cascade, confidence: their own orders
            allowance = scoring.episode_allowance(query.limit, s.recall_episode_rows)
            return RecallResult(rows=scoring.place_episodes(kept, query.limit, allowance))
        return RecallResult(rows=kept[: query.limit], gate_fallback=fallback)
