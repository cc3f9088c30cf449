"""recall as a straight line (retrieval.md §1; issue 31):

    RecallQuery -> channels -> [list steps] -> fusion (or the cascade) -> score -> gate, autocut
    and cut -> bookkeeping

under one snapshot from the first channel to the last score (the query's embedding and the
remote service's call come before it; the bookkeeping, a write, after). Two-phase: the vector
arm ranks ids and scores in the kernels, and its rows are read with the next read of their
table; the lists are complete (hydrated) before any step or fusion looks at them.
"""

from __future__ import annotations

import logging
from contextlib import nullcontext
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Protocol

import numpy as np

from cpersona import _backend
from cpersona.config import Settings
from cpersona.embedding.base import EmbeddingMisconfigured
from cpersona.errors import EmbeddingUnavailable
from cpersona.retrieval import channels as channel_choice
from cpersona.retrieval import scoring
from cpersona.retrieval.advisory import EmbeddingHealth
from cpersona.retrieval.candidates import Candidate, dedupe, profile_row
from cpersona.retrieval.channel import RankedList
from cpersona.retrieval.channels import IndexFiles
from cpersona.retrieval.fusion import Fusion, admitted
from cpersona.retrieval.hydration import Hydration
from cpersona.retrieval.recall_query import RecallQuery, recall_query
from cpersona.retrieval.request import QueryVector, RecallRequest, RecallResult
from cpersona.retrieval.scope_reads import ScopeReads
from cpersona.retrieval.scored import Scorer
from cpersona.retrieval.supersession import Supersession
from cpersona.retrieval.thresholds import Thresholds
from cpersona.retrieval.trace import Trace, no_trace
from cpersona.retrieval.vector_channels import remote_readable
from cpersona.storage import Store, search
from cpersona.storage.error_kinds import StorageError, UnreachableError
from cpersona.timings import stage
from cpersona.vectors.remote import RemoteVectors

if TYPE_CHECKING:
    from cpersona.embedding.cache import CachedProvider
    from cpersona.embedding.routing import ModelRouter

    Route = tuple[CachedProvider | None, frozenset[str]]

__all__ = [
    "QueryVector",
    "RecallParts",
    "RecallRequest",
    "RecallResult",
    "Recaller",
    "Trace",
    "no_trace",
]

log = logging.getLogger("cpersona.recall")


class ListStep(Protocol):
    """A step between the channels and fusion, on each hydrated list in turn (the cascade's
    keyword list too): for instance, superseded rows replaced by their successors
    (retrieval/supersession.py). `reads` is the recall's hydration (rows it adds are read in
    the recall's scope and snapshot); `trace` is the recall's."""

    def __call__(
        self, query: RecallQuery, ranked: RankedList, reads: Hydration, trace: Trace
    ) -> RankedList: ...


@dataclass(frozen=True, slots=True)
class RecallParts:
    """What a recaller is built from besides its database and settings (engine.py)."""

    router: ModelRouter
    thresholds: Thresholds
    health: EmbeddingHealth
    files: IndexFiles
    remote: RemoteVectors | None = None


class Recaller:
    """The recall pipeline over one database, embedder and set of channels."""

    def __init__(self, db: Store, settings: Settings, parts: RecallParts) -> None:
        self.db = db
        self.s = settings
        self.router = parts.router
        self.thresholds = parts.thresholds
        self.health = parts.health
        self.remote = parts.remote
        #: The kernels of the vector scan, fusion and backfill: those the settings name.
        self.kernels = _backend.load(settings.kernel)
        #: Each arm's channel on this store, chosen once (retrieval/channels.py).
        self.channels = channel_choice.choose(
            db, settings, parts.files, remote=parts.remote is not None
        )
        #: The index files its channels read (store's supersede candidates scan one too).
        self.files = parts.files
        #: Declared supersession (issue 32): a list step, and the answer's marks.
        self.supersession = Supersession(db, settings.scope_stats_ttl_seconds)
        #: Steps between the channels and fusion, in order (ListStep).
        self.list_steps: tuple[ListStep, ...] = (self.supersession,)
        self.fusion = Fusion(self.kernels, settings.rrf_k)
        self.scorer = Scorer(db, settings, parts.thresholds, self.kernels)
        #: The route (query provider, tables) the last snapshot read (`_embed_query`).
        self._last_route: Route | None = None

    def invalidate_stats(self) -> None:
        self.scorer.invalidate_stats()

    # -- the pipeline ------------------------------------------------------------------------

    def recall(self, req: RecallRequest, trace: Trace = no_trace) -> RecallResult:
        s = self.s
        limit = max(0, min(req.limit, s.recall_library_max_limit))
        if req.limit > s.recall_library_max_limit:
            log.warning("recall limit %d clamped to %d", req.limit, s.recall_library_max_limit)
        if not self.router.configured.available:
            self.health.observe_none()
        query = self._query(req, limit)
        if self.remote is not None and not query.blank and limit > 0 and req.span is None:
            # The remote service knows no instants: a time-scoped recall scans locally.
            hits = self.remote.search(req.agent_id, req.query, limit, query.scan.threshold)
            query = replace(query, remote=None if hits is None else tuple(hits))
        # A remote list is authoritative: no local scan, no far list, no query embedding.
        if not query.blank and query.remote is None:
            query = replace(query, vector=self._embed_query(req.query))
        result = RecallResult(rows=[])
        reads = self._reads(query)  # before: its first read goes with BEGIN
        with self.db.snapshot():
            if query.remote is not None and not remote_readable(query, reads.rows):
                query = replace(query, remote=None, vector=self._embed_query(req.query))
            query, rows = self._ranked(query, reads, trace)
            if rows and limit > 0:
                with stage("scoring"):
                    rows, pool = self.scorer.score(query, rows, reads)
                trace("scoring", rows)
                with stage("gate"):
                    result = self.scorer.gate_and_cut(query, rows, pool, trace)
                trace("gate", result.rows, {"limit": query.limit})
        if result.rows:
            self._bookkeeping(req, result)
        if s.degraded_advisory:
            result.advisory = self.health.advisory(req.session_key)
        return result

    def score_without_gate(
        self, agent_id: str, query: str, limit: int = 20, *, qvec: QueryVector | None = None
    ) -> list[Candidate]:
        """The fused-gate calibration's pseudo-recall (retrieval.md §15.4), best first.

        The active mode's fusion (cascade for a blank query or when the mode is neither rrf nor
        rsf) with `limit`, agent-wide (every project and channel, no source filter, no
        exclusions), then §6 scoring: no gate, no autocut, no bookkeeping. `qvec` is the
        query's embedding when the caller already has it; otherwise the query is embedded here.
        """
        q = self._query(RecallRequest(agent_id=agent_id, query=query, limit=limit), limit)
        if qvec is None and not q.blank:
            qvec = self._embed_query(query)
        q = replace(q, vector=qvec)
        reads = self._reads(q)
        with self.db.snapshot():  # as recall's: one snapshot, the embedding before it
            q, rows = self._ranked(q, reads, no_trace)
            if not rows or limit <= 0:
                return []
            with stage("scoring"):
                rows, _ = self.scorer.score(q, rows, reads)
        return rows

    def _query(self, req: RecallRequest, limit: int) -> RecallQuery:
        threshold = self.thresholds.vector_threshold(req.agent_id)
        return recall_query(req, self.s, limit, threshold)

    def _reads(self, query: RecallQuery) -> ScopeReads:
        """This recall's reads of its scope (the scalar ones in one statement on PostgreSQL;
        the pool and span among them only when the scope-stats cache has none)."""
        scope = query.scope
        cap = None if self.scorer.cached_stats(scope) is not None else scoring.POOL_SATURATION
        return ScopeReads(self.db, scope, cap)

    # -- channels, list steps, fusion --------------------------------------------------------

    def _ranked(
        self, query: RecallQuery, reads: ScopeReads, trace: Trace
    ) -> tuple[RecallQuery, list[Candidate]]:
        """The candidates of every channel, fused (or cascaded), with the profile row; and the
        query whose vector the snapshot's model record confirmed."""
        query, lists = self._channel_lists(query, reads)
        lists = [self._stepped(query, lst, reads, trace) for lst in lists]
        trace("channels", lists)
        if query.fused:
            with stage("fusion"):
                rows = self.fusion(query.mode, lists, query.exclusions)
            if profile := reads.profile():
                rows.append(profile_row(profile))
        else:
            rows = self._cascade(query, lists, reads, trace)
        trace("fusion", rows, {"mode": query.mode})
        return query, rows

    def _channel_lists(
        self, query: RecallQuery, reads: ScopeReads
    ) -> tuple[RecallQuery, list[RankedList]]:
        """Each channel's lists, hydrated. The vector arm ranks first with the vector the last
        snapshot's route embedded; the route is checked after (on PostgreSQL the scan runs
        while the snapshot's BEGIN is on its way) and the arm ranks again if it changed."""
        ch = self.channels
        vector = ch.vector.rank(query, reads.rows)
        routed = self._routed(query)
        if routed is not query:  # the model changed since the last snapshot: scan again
            query = routed
            vector = ch.vector.rank(query, reads.rows)
        lists: list[RankedList] = []
        # The cascade ranks its keyword channel last, for what the others leave (_cascade).
        for channel in ch.fused if query.fused else (ch.episodes,):
            lists += channel.rank(query, reads.rows)
        # Timed as the vector rows' read, where the local scan ranks them (cascade) or can.
        scanned = query.vector is not None and not query.blank and query.limit > 0
        timed = query.remote is None and (query.fused or scanned)
        with stage("hydration") if timed else nullcontext():
            return query, [lst.hydrated(reads.rows) for lst in vector + lists]

    def _stepped(
        self, query: RecallQuery, ranked: RankedList, reads: ScopeReads, trace: Trace
    ) -> RankedList:
        for step in self.list_steps:
            ranked = step(query, ranked, reads.rows, trace)
        return ranked

    def _cascade(
        self, query: RecallQuery, lists: list[RankedList], reads: ScopeReads, trace: Trace
    ) -> list[Candidate]:
        """§5.1: the near list, then the episode hits, deduplicated; the profile; then keyword
        rows for the places left."""
        by_name = {lst.name: lst for lst in lists}
        rows = admitted(by_name["near"], query.exclusions) + by_name["episodes"].rows
        rows = dedupe(rows)
        if profile := reads.profile():
            rows.append(profile_row(profile))
        remaining = query.limit - len(rows)
        if remaining > 0:
            (keyword,) = self.channels.keyword.rank(replace(query, limit=remaining), reads.rows)
            keyword = self._stepped(query, keyword, reads, trace)
            trace("channels", [keyword])
            rows = dedupe(rows + admitted(keyword, query.exclusions))
        return rows

    # -- the query's vector ------------------------------------------------------------------

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

    def _routed(self, query: RecallQuery) -> RecallQuery:
        """`query` if the snapshot's vectors are its vector's model's, else with the query
        embedded anew."""
        qvec = query.vector
        if qvec is None or not qvec.model:
            return query
        provider, tables = route = self.router.query()
        self._last_route = route if provider is not None else None
        same = provider is not None and provider.name == qvec.model and tables == qvec.tables
        return query if same else replace(query, vector=self._embed_query(query.text, route))

    # -- after the snapshot ------------------------------------------------------------------

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
