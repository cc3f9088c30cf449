"""What one recall asks, built once per call (issue 31): the scope, the query's terms, the
scan limits, the exclusions, the query vector and its route. Every channel reads this one
frozen value; a step that learns something new (the snapshot's route changed the vector)
makes a new one with `dataclasses.replace`."""

from __future__ import annotations

from dataclasses import dataclass

from cpersona.config import Settings
from cpersona.retrieval.query import match_terms, normalise_exclusions
from cpersona.retrieval.request import QueryVector, RecallRequest
from cpersona.storage.scan_request import ScanLimits, Scope
from cpersona.vectors.remote import Hit as RemoteHit

#: The modes that fuse lists (retrieval.md §5); every other recall is a cascade.
FUSED_MODES = ("rrf", "rsf")


@dataclass(frozen=True, slots=True)
class RecallQuery:
    """One recall's question, as every channel reads it."""

    scope: Scope
    #: The query as written (the LIKE fallback's text) and its full-text terms (§4.8), in order.
    text: str
    terms: tuple[str, ...]
    #: "rrf", "rsf" or "cascade" (a blank query always cascades).
    mode: str
    limit: int
    deep: bool
    exclusions: tuple[str, ...]
    #: The vector arms' window, reach, threshold and list lengths (§4.2-4.3).
    scan: ScanLimits
    #: The query's embedding with the tables it may be compared with (its route); None: no
    #: vector search runs.
    vector: QueryVector | None = None
    #: The remote service's ranked hits (§4.5); None: no remote list, the local arms rank.
    remote: tuple[RemoteHit, ...] | None = None
    #: issue 32: superseded rows kept beside their successors (retrieval/supersession.py).
    include_superseded: bool = False

    @property
    def blank(self) -> bool:
        return not self.text.strip()

    @property
    def fused(self) -> bool:
        return self.mode in FUSED_MODES

    @property
    def episodes(self) -> bool:
        """Whether episodes can be in scope: a source filter without a channel admits
        memories only (episodes have no source)."""
        return not (self.scope.source_prefix and not self.scope.channel)


def recall_query(req: RecallRequest, s: Settings, limit: int, threshold: float) -> RecallQuery:
    """`req` as a RecallQuery with its `limit` (clamped by the caller); `threshold` is the
    agent's vector threshold, scaled here when the query is fused (§4.2)."""
    fused = bool(req.query.strip()) and s.recall_mode in FUSED_MODES
    mode = s.recall_mode if fused else "cascade"
    threshold = threshold * s.rrf_threshold_factor if fused else threshold
    far_k = min(limit, s.vector_far_limit) if s.vector_far_limit > 0 else limit
    # The far region only where fusion can weigh it (§19.2) and the reach passes the window.
    reach = s.vector_reach if fused and s.vector_reach > s.max_memories else 0
    return RecallQuery(
        scope=Scope(req.agent_id, req.project, req.channel, req.source_id, req.span),
        text=req.query,
        terms=tuple(match_terms(req.query)),
        mode=mode,
        limit=limit,
        deep=req.deep,
        exclusions=tuple(normalise_exclusions(list(req.exclude_contents))),
        scan=ScanLimits(s.max_memories, reach, threshold, limit, far_k),
        include_superseded=req.include_superseded,
    )
