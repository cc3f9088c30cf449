"""recall: retrievers -> fusion -> scoring -> gate -> autocut -> cut (retrieval.md §1).

Two-phase: the retrievers rank ids and scores (the vector arm in the kernels), and only the
survivors are hydrated from SQLite.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import numpy as np

from cpersona import _backend
from cpersona.config import Settings
from cpersona.embedding.base import EmbeddingMisconfigured
from cpersona.errors import EmbeddingUnavailable, FullTextUnavailable
from cpersona.fts import search as fts_search
from cpersona.fts.index import FtsIndex
from cpersona.memory.text import parse_utc
from cpersona.retrieval import scoring
from cpersona.retrieval import trace as tracing
from cpersona.retrieval.advisory import EmbeddingHealth
from cpersona.retrieval.candidates import (
    Candidate,
    dedupe,
    from_episode,
    from_memory,
    merged_vector_list,
    profile_row,
)
from cpersona.retrieval.hydration import Hydration, Ranked
from cpersona.retrieval.query import (
    is_excluded,
    match_expression,
    match_terms_of,
    normalise_exclusions,
)
from cpersona.retrieval.request import QueryVector, RecallRequest, RecallResult
from cpersona.retrieval.scope_reads import ScopeReads
from cpersona.retrieval.supersession import Supersession
from cpersona.retrieval.thresholds import Thresholds
from cpersona.storage import Store, search
from cpersona.storage.error_kinds import OperationalError, StorageError, UnreachableError
from cpersona.storage.scan_request import ScanLimits, Scope
from cpersona.storage.search import EpisodeHit, MemoryHit, ScopeSql
from cpersona.timings import stage
from cpersona.vectors.index import VectorIndex
from cpersona.vectors.remote import Hit as RemoteHit
from cpersona.vectors.remote import RemoteVectors
from cpersona.vectors.search import scan_table

if TYPE_CHECKING:
    from cpersona.embedding.cache import CachedProvider
    from cpersona.embedding.routing import ModelRouter

    Route = tuple[CachedProvider | None, frozenset[str]]

log = logging.getLogger("cpersona.recall")


class Recaller:
    """The recall pipeline over one database, embedder and pair of vector indexes."""

    def __init__(
        self,
        db: Store,
        settings: Settings,
        router: ModelRouter,
        indexes: dict[str, VectorIndex],
        thresholds: Thresholds,
        health: EmbeddingHealth,
        fts: dict[str, FtsIndex] | None = None,
        *,
        remote: RemoteVectors | None = None,
    ) -> None:
        self.db = db
        #: The full-text indexes; without them (no Rust core) FTS5 answers the FTS arms.
        self.fts = fts or {}
        self.remote = remote
        self.s = settings
        self.router = router
        self.indexes = indexes
        self.thresholds = thresholds
        self.health = health
        #: The kernels of the vector scan, fusion and backfill: those the settings name.
        self.kernels = _backend.load(settings.kernel)
        self._stats: dict[tuple[str, str | None, str], tuple[float, int, tuple[Any, Any]]] = {}
        self._stats_lock = threading.Lock()
        #: The route (query provider, tables) the last snapshot read (`_embed_query`).
        self._last_route: Route | None = None
        # issue 32 hook: declared supersession (retrieval/supersession.py owns it).
        self.supersession = Supersession(db, settings.scope_stats_ttl_seconds)

    def invalidate_stats(self) -> None:
        """Own writes change pool counts at once (the TTL is for other processes' writes)."""
        with self._stats_lock:
            self._stats.clear()

    # -- the pipeline ------------------------------------------------------------------------

    def recall(self, req: RecallRequest) -> RecallResult:
        s = self.s
        limit = max(0, min(req.limit, s.recall_library_max_limit))
        if req.limit > s.recall_library_max_limit:
            log.warning("recall limit %d clamped to %d", req.limit, s.recall_library_max_limit)
        if not self.router.configured.available:
            self.health.observe_none()
        exclusions = normalise_exclusions(list(req.exclude_contents))
        blank = not req.query.strip()
        mode = s.recall_mode if (not blank and s.recall_mode in ("rrf", "rsf")) else "cascade"
        scope = ScopeSql(req.agent_id, req.project, req.channel, req.span)
        episodes_ok = not (req.source_id and not req.channel)
        hits = None  # The remote service knows no instants: a time-scoped recall scans locally.
        if self.remote is not None and not blank and limit > 0 and req.span is None:
            threshold = self._threshold(req.agent_id, mode != "cascade")
            hits = self.remote.search(req.agent_id, req.query, limit, threshold)
        # A remote list is authoritative: no local scan, no far list, no query embedding.
        qvec = self._embed_query(req.query) if not blank and hits is None else None
        result = RecallResult(rows=[])
        reads = self._reads(scope, req.source_id)  # before: its first read goes with BEGIN
        # One snapshot from the first retriever to the last score (embedding, remote call before).
        with self.db.snapshot():
            remote = None if hits is None else self._remote_rows(hits, reads.rows, episodes_ok)
            if hits is not None and remote is None:  # unreadable hits: the local scan runs
                qvec = self._embed_query(req.query)
            ok = episodes_ok
            if mode == "cascade":
                qvec = self._routed(qvec, req.query)
                rows = self._cascade(req, scope, qvec, limit, exclusions, blank, ok, reads, remote)
            else:
                rows, qvec = self._fused(
                    req, mode, scope, qvec, limit, exclusions, ok, reads, remote
                )
            if rows and limit > 0:
                with stage("scoring"):
                    rows, pool = self._score(req, scope, rows, qvec, reads)
                with stage("gate"):
                    result = self._gate_and_cut(req, rows, pool, limit, blank)
        if result.rows:
            self._bookkeeping(req, result)
        if s.degraded_advisory:
            result.advisory = self.health.advisory(req.session_key)
        return result

    def _embed_query(self, query: str, route: Route | None = None) -> QueryVector | None:
        """The query's vector by the model of the stored vectors (`route`: as a snapshot read
        it), with the tables it may be compared with; None when no vector search can run
        (never a vector of another model)."""
        if not self.router.configured.available:
            return None
        # Before the snapshot, the last snapshot's route is a guess that saves a read (a round
        # trip on PostgreSQL): the snapshot's own check (_routed) re-embeds when it fails.
        provider, tables = route or self._last_route or self.router.query()
        if provider is None:
            foreign = self.router.foreign()
            models = ", ".join(sorted(set(foreign.values())))
            self.health.observe_foreign(
                f"stored vectors were made by {models}, which is not available here "
                f"(configured: {self.router.configured.name})"
            )
            return None
        try:
            with stage("query_embedding"):
                vec, hit = provider.embed_one(query, "query")
        except EmbeddingMisconfigured as exc:
            self.health.observe_failure(str(exc), misconfigured=True)
            return None
        except EmbeddingUnavailable as exc:
            self.health.observe_failure(str(exc), misconfigured=False)
            return None
        if not hit:
            self.health.observe_ok()
        return QueryVector(np.ascontiguousarray(vec, dtype=np.float32), tables, provider.name)

    def _routed(self, qvec: QueryVector | None, query: str) -> QueryVector | None:
        """`qvec` if the snapshot's vectors are its model's, else the query embedded anew."""
        if qvec is None or not qvec.model:
            return qvec
        provider, tables = route = self.router.query()
        self._last_route = route if provider is not None else None
        same = provider is not None and provider.name == qvec.model and tables == qvec.tables
        return qvec if same else self._embed_query(query, route)

    def score_without_gate(
        self, agent_id: str, query: str, limit: int = 20, *, qvec: QueryVector | None = None
    ) -> list[Candidate]:
        """The fused-gate calibration's pseudo-recall (retrieval.md §15.4), best first.

        The active mode's fusion (cascade for a blank query or when the mode is neither rrf nor
        rsf) with `limit`, agent-wide (every project and channel, no source filter, no
        exclusions), then §6 scoring: no gate, no autocut, no bookkeeping. `qvec` is the
        query's embedding when the caller already has it; otherwise the query is embedded here.
        """
        req = RecallRequest(agent_id=agent_id, query=query, limit=limit)
        blank = not query.strip()
        fused = not blank and self.s.recall_mode in ("rrf", "rsf")
        mode = self.s.recall_mode if fused else "cascade"
        scope = ScopeSql(agent_id, req.project, "")
        if qvec is None and not blank:
            qvec = self._embed_query(query)
        reads = self._reads(scope, "")
        with self.db.snapshot():  # as recall's: one snapshot, the embedding before it
            if mode == "cascade":
                qvec = self._routed(qvec, query)
                rows = self._cascade(req, scope, qvec, limit, [], blank, True, reads)
            else:
                rows, qvec = self._fused(req, mode, scope, qvec, limit, [], True, reads)
            if not rows or limit <= 0:
                return []
            with stage("scoring"):
                rows, _ = self._score(req, scope, rows, qvec, reads)
        return rows

    # -- retrievers --------------------------------------------------------------------------

    def _vector(
        self,
        req: RecallRequest,
        scope: ScopeSql,
        qvec: QueryVector,
        threshold: float,
        limit: int,
        far: bool,
        episodes_ok: bool,
        rows: Hydration,
    ) -> tuple[list[Ranked], list[Ranked]]:
        """The near list and the far list (§4.2-4.3), best first; their rows are read with
        the next read of `rows` (hydration.py)."""
        s = self.s
        far_k = min(limit, s.vector_far_limit) if s.vector_far_limit > 0 else limit
        reach = s.vector_reach if far else 0
        limits = ScanLimits(s.max_memories, reach, threshold, limit, far_k)
        per_table = {}
        with stage("vector_scan"):
            for table in ("memories", "episodes"):
                if (table == "episodes" and not episodes_ok) or table not in qvec.tables:
                    per_table[table] = ([], [])
                    continue
                prefix = req.source_id if table == "memories" else ""
                hits = scan_table(
                    self.db,
                    table,
                    self.indexes.get(table),
                    qvec.vector,
                    Scope(req.agent_id, req.project, req.channel, prefix, req.span),
                    limits,
                    chunk_rows=s.vector_scan_chunk_rows,
                    kernels=self.kernels,
                )
                per_table[table] = (
                    list(zip(hits.near_ids.tolist(), hits.near_scores.tolist(), strict=True)),
                    list(zip(hits.far_ids.tolist(), hits.far_scores.tolist(), strict=True)),
                )
        near = merged_vector_list(per_table["memories"][0], per_table["episodes"][0], limit)
        far_list = merged_vector_list(per_table["memories"][1], per_table["episodes"][1], far_k)
        near_ids = {(k, i) for k, i, _ in near}
        overlap = [(k, i, sc) for k, i, sc in far_list if (k, i) in near_ids]
        if overlap:
            log.warning("far list overlapped the near list (%d rows); dropped", len(overlap))
            far_list = [(k, i, sc) for k, i, sc in far_list if (k, i) not in near_ids]
        rows.expect(near + far_list)
        return near, far_list

    def _remote_rows(
        self, hits: list[RemoteHit], rows: Hydration, episodes_ok: bool
    ) -> list[Candidate] | None:
        """The remote list hydrated in its order (retrieval.md §4.5); None: unreadable rows."""
        ranked = [(h.kind, h.row_id, h.score) for h in hits if h.kind == "mem" or episodes_ok]
        try:
            return rows.candidates(ranked)
        except UnreachableError:
            raise
        except StorageError as exc:
            log.warning("remote vector hits could not be read (%s); using the local scan", exc)
            return None

    def _memory_fts(
        self, scope: ScopeSql, source: str, match: str, limit: int, hydration: Hydration
    ) -> list[MemoryHit]:
        """The memory FTS channel: the full-text index, else the FTS5 statement (same rows)."""
        index = self.fts.get("memories")
        if index is not None:
            ranked = fts_search.ranked(index, match_terms_of(match), scope, source, limit)
            if ranked is not None:
                rows = hydration.memories([i for i, _ in ranked])
                return [replace(rows[i], bm25=b) for i, b in ranked if i in rows]
        return search.memory_fts(self.db, scope, source, match, limit)

    def _episode_hits(
        self, scope: ScopeSql, match: str, limit: int, hydration: Hydration
    ) -> list[EpisodeHit]:
        index = self.fts.get("episodes")
        if index is not None:
            ranked = fts_search.ranked(index, match_terms_of(match), scope, "", limit)
            if ranked is not None:
                rows = hydration.episodes([i for i, _ in ranked])
                return [replace(rows[i], bm25=b) for i, b in ranked if i in rows]
        return search.episode_fts(self.db, scope, match, limit)

    def _episode_fts(
        self, scope: ScopeSql, match: str, limit: int, hydration: Hydration
    ) -> list[Candidate]:
        if not (self.s.fts_enabled and match and limit > 0):
            return []
        try:
            return [from_episode(h) for h in self._episode_hits(scope, match, limit, hydration)]
        except UnreachableError:
            raise  # no channel can answer: the call is refused (server/app.py)
        except (OperationalError, FullTextUnavailable) as exc:
            log.warning("episode FTS failed (%s); that channel is empty for this recall", exc)
            return []

    def _keyword(
        self,
        req: RecallRequest,
        scope: ScopeSql,
        match: str,
        limit: int,
        blank: bool,
        hydration: Hydration,
    ) -> list[Candidate]:
        """The memory keyword channel: FTS, else the LIKE fallback; recency for a blank query."""
        if limit <= 0:
            return []
        if blank:
            return [
                from_memory(h) for h in search.memory_recent(self.db, scope, req.source_id, limit)
            ]
        hits: list[Any] = []
        if self.s.fts_enabled and match:
            try:
                hits = self._memory_fts(scope, req.source_id, match, limit, hydration)
            except UnreachableError:
                raise
            except (OperationalError, FullTextUnavailable) as exc:
                log.warning("memory FTS failed (%s); using the LIKE fallback", exc)
                hits = []
        if not hits:
            read = min(self.s.max_memories, max(5 * limit, 50))
            hits = search.memory_like(self.db, scope, req.source_id, req.query, read)
            hits = hits[:limit]
        return [from_memory(h) for h in hits]

    def _reads(self, scope: ScopeSql, source: str) -> ScopeReads:
        """This recall's reads of `scope` (the scalar ones in one statement on PostgreSQL;
        the pool and span among them only when the scope-stats cache has none)."""
        cached = self._cached_stats(scope) is not None
        return ScopeReads(self.db, scope, source, None if cached else scoring.POOL_SATURATION)

    # -- cascade and fusion ------------------------------------------------------------------

    def _threshold(self, agent_id: str, fused: bool) -> float:
        t = self.thresholds.vector_threshold(agent_id)
        return t * self.s.rrf_threshold_factor if fused else t

    def _cascade(
        self,
        req: RecallRequest,
        scope: ScopeSql,
        qvec: QueryVector | None,
        limit: int,
        exclusions: list[str],
        blank: bool,
        episodes_ok: bool,
        reads: ScopeReads,
        remote: list[Candidate] | None = None,
    ) -> list[Candidate]:
        rows: list[Candidate] = []
        if remote is not None:
            rows += [r for r in remote if not is_excluded(r.content, exclusions)]
        elif qvec is not None and not blank and limit > 0:
            threshold = self._threshold(req.agent_id, False)
            ranked, _ = self._vector(
                req, scope, qvec, threshold, limit, False, episodes_ok, reads.rows
            )
            with stage("hydration"):
                near = reads.rows.candidates(ranked)
            rows += [r for r in near if not is_excluded(r.content, exclusions)]
        match = match_expression(req.query) if not blank else ""
        if not blank and episodes_ok:
            with stage("full_text"):
                rows += self._episode_fts(scope, match, limit, reads.rows)
        rows = dedupe(rows)
        if profile := reads.profile():
            rows.append(profile_row(profile))
        remaining = limit - len(rows)
        if remaining > 0:
            with stage("keyword"):
                kw = self._keyword(req, scope, match, remaining, blank, reads.rows)
            rows = dedupe(rows + [r for r in kw if not is_excluded(r.content, exclusions)])
        # issue 32 hook: superseded rows replaced by their successors (one ranked list here).
        (rows,) = self.supersession.replace(
            req.agent_id,
            [rows],
            reads.rows.candidates,
            span=req.span,
            include_superseded=req.include_superseded,
        )
        if (trace := tracing.current()) is not None:  # issue 32 hook: recall's trace
            trace.arms({"cascade": rows})
        return rows

    def _fused(
        self,
        req: RecallRequest,
        mode: str,
        scope: ScopeSql,
        qvec: QueryVector | None,
        limit: int,
        exclusions: list[str],
        episodes_ok: bool,
        reads: ScopeReads,
        remote: list[Candidate] | None = None,
    ) -> tuple[list[Candidate], QueryVector | None]:
        """The fused candidates and the query vector the snapshot's model record confirmed
        (`qvec` embedded by the last snapshot's route, checked here after the vector scans:
        on PostgreSQL they run while the snapshot's BEGIN is on its way)."""
        s = self.s
        near: list[Candidate] = []
        far: list[Candidate] = []
        scans = remote is None and limit > 0
        want_far = s.vector_reach > s.max_memories
        threshold = self._threshold(req.agent_id, True)

        def scanned(q: QueryVector | None) -> tuple[list[Ranked], list[Ranked]]:
            if q is None or not scans:
                return [], []
            return self._vector(req, scope, q, threshold, limit, want_far, episodes_ok, reads.rows)

        ranked = scanned(qvec)
        routed = self._routed(qvec, req.query)
        if routed is not qvec:  # the model changed since the last snapshot: scan again
            qvec, ranked = routed, scanned(routed)
        if remote is not None:
            near = remote
        match = match_expression(req.query)
        episodes: list[Candidate] = []
        if episodes_ok:
            with stage("full_text"):
                episodes = self._episode_fts(scope, match, limit, reads.rows)
        keyword: list[Candidate] = []
        if s.fts_enabled:
            with stage("keyword"):
                keyword = self._keyword(req, scope, match, limit, False, reads.rows)
        if remote is None:  # the vector rows: read with the arms' above (hydration.py)
            with stage("hydration"):
                near, far = reads.rows.candidates(ranked[0]), reads.rows.candidates(ranked[1])
        with stage("fusion"):
            # issue 32 hook: superseded rows replaced by their successors in each arm's list.
            near, far, episodes, keyword = self.supersession.replace(
                req.agent_id,
                [near, far, episodes, keyword],
                reads.rows.candidates,
                span=req.span,
                include_superseded=req.include_superseded,
            )
            if (trace := tracing.current()) is not None:  # issue 32 hook: recall's trace
                names = ("vector", "vector_far", "episode_fts", "keyword")
                trace.arms(dict(zip(names, (near, far, episodes, keyword), strict=True)))
            out = self._fuse(mode, [near, far, episodes, keyword], exclusions)
            if trace is not None:  # issue 32 hook
                trace.fusion(out, mode)
        if profile := reads.profile():
            out.append(profile_row(profile))
        return out, qvec

    def _fuse(
        self, mode: str, lists: list[list[Candidate]], exclusions: list[str]
    ) -> list[Candidate]:
        """rrf or rsf over the near, far, episode-FTS and keyword lists, best first."""
        s = self.s
        near, far, episodes, keyword = lists
        excluded = lambda r: is_excluded(r.content, exclusions)  # noqa: E731
        channels = [(near, True), (far, True), (episodes, False), (keyword, True)]
        by_key: dict[int, Candidate] = {}
        # The far list last: a row FTS or keyword search also returns keeps the row object
        # (and so the gate signal) it has without the reach; a far vote only adds (§19.2).
        for rows, filt in (channels[0], channels[2], channels[3], channels[1]):
            for r in rows:
                if not (filt and excluded(r)):
                    by_key.setdefault(r.key, r)
        # Fusion ties go to the lexical lists: E, M, then V, F (2.5.x: V, F, E, M). A vector
        # arm that cannot read the language (MiniLM on Japanese) otherwise wins every tie with
        # BM25's first row: JSQuAD R@1 0.32 -> 0.68 under rrf (docs/quality.md).
        fused = [channels[2], channels[3], channels[0], channels[1]]
        if mode == "rrf":
            rankings = [
                np.array([-1 if (filt and excluded(r)) else r.key for r in rows], dtype=np.int64)
                for rows, filt in fused
            ]
            keys, scores = self.kernels.rrf(rankings, k=s.rrf_k)
            attr = "rrf"
        else:
            rankings, raws = [], []
            for (rows, filt), cosine_scale in zip(fused, (False, False, True, True), strict=True):
                kept = [r for r in rows if not (filt and excluded(r))]
                rankings.append(np.array([r.key for r in kept], dtype=np.int64))
                raws.append(
                    np.array(
                        [
                            (
                                r.cosine
                                if cosine_scale
                                else (-r.bm25 if r.bm25 is not None else np.nan)
                            )
                            for r in kept
                        ],
                        dtype=np.float64,
                    )
                )
            keys, scores = self.kernels.rsf(rankings, raws)
            attr = "rsf"
        out = []
        for key, score in zip(keys.tolist(), scores.tolist(), strict=True):
            row = by_key[key]
            setattr(row, attr, float(score))
            out.append(row)
        return out

    # -- scoring, gate, cut ------------------------------------------------------------------

    def _cached_stats(self, scope: ScopeSql) -> tuple[int, tuple[Any, Any]] | None:
        if not self.s.scope_stats_cache:
            return None
        key = (scope.agent_id, scope.project.value, scope.channel)
        with self._stats_lock:
            hit = self._stats.get(key)
        if hit is not None and time.monotonic() - hit[0] < self.s.scope_stats_ttl_seconds:
            return hit[1], hit[2]
        return None

    def _scope_stats(self, scope: ScopeSql, reads: ScopeReads) -> tuple[int, tuple[Any, Any]]:
        if (hit := self._cached_stats(scope)) is not None:
            return hit
        key = (scope.agent_id, scope.project.value, scope.channel)
        now = time.monotonic()
        # Capped: every pool of POOL_SATURATION rows or more gates alike (scoring.gate).
        pool, span = reads.stats(scoring.POOL_SATURATION)
        if self.s.scope_stats_cache:
            with self._stats_lock:
                if len(self._stats) >= 256:
                    self._stats.clear()
                self._stats[key] = (now, pool, span)
        return pool, span

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

    def _score(
        self,
        req: RecallRequest,
        scope: ScopeSql,
        rows: list[Candidate],
        qvec: QueryVector | None,
        reads: ScopeReads,
    ) -> tuple[list[Candidate], int]:
        """§6 on the fused list: backfill, penalty, re-sort, confidence. Returns (rows, N_pool)."""
        s = self.s
        if s.confidence_enabled:
            self._backfill(rows, qvec)
        fused, cosines = list(rows), [r.cosine for r in rows]  # issue 32: for the trace
        boundary = parse_utc(reads.latest_episode_created())
        penalised = scoring.episode_penalty(rows, boundary, s)
        if penalised and not s.confidence_enabled:
            rows = scoring.penalty_resort(rows)
        pool, (t_min, t_max) = self._scope_stats(scope, reads)
        if s.confidence_enabled:
            now = datetime.now(UTC)
            span = scoring.scope_span(t_min, t_max, now)
            history = search.recall_history(self.db, [r.id for r in rows if r.kind == "mem"])
            for row in rows:
                hist = history.get(row.id, (0, None)) if row.kind == "mem" else (0, None)
                row.confidence, row.confidence_detail = scoring.confidence(
                    row, span, hist, req.deep, now, s
                )
            rows = sorted(rows, key=scoring.confidence_order)
        if (trace := tracing.current()) is not None:  # issue 32 hook: recall's trace
            trace.scoring(fused, cosines, rows)
        return rows, pool

    def _gate_and_cut(
        self,
        req: RecallRequest,
        rows: list[Candidate],
        pool: int,
        limit: int,
        blank: bool,
    ) -> RecallResult:
        """§7 gate, §9 rescue, §11 autocut and the limit cut."""
        s = self.s
        fused_gate = (
            self.thresholds.fused_gate(req.agent_id) if s.fused_gate_enabled else (None, None)
        )
        kept = scoring.gate(rows, pool, req.deep, blank, fused_gate, s.rrf_k)
        fallback = False
        if not any(not r.is_profile for r in kept) and any(r.backfilled for r in rows):
            profile_kept = any(r.is_profile for r in kept)
            kept = [r for r in rows if r.backfilled or (r.is_profile and profile_kept)]
            fallback = True
        gated = kept
        if not fallback:
            kept = scoring.autocut(kept, s)
        if (trace := tracing.current()) is not None:  # issue 32 hook: recall's trace
            trace.gate(
                rows, gated, pool=pool, deep=req.deep, fused_gate=fused_gate, fallback=fallback
            )
            trace.autocut(gated, kept)
            trace.order(kept, limit)
        return RecallResult(rows=kept[:limit], gate_fallback=fallback)

    def _bookkeeping(self, req: RecallRequest, result: RecallResult) -> None:
        """§12: the recall counts of the memories returned (after the snapshot: a write)."""
        if self.s.confidence_enabled and not (req.deep or result.gate_fallback or req.paused):
            ids = [r.id for r in result.rows if r.kind == "mem"]
            try:
                search.bump_recall_counts(self.db, ids)
            except UnreachableError:
                raise  # the answer would be refused anyway; no traceback per call
            except StorageError:
                log.exception("recall-count bookkeeping failed (ignored)")
