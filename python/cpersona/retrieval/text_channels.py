"""The full-text and keyword arms (retrieval.md §4.6-4.7) as channels.

A full-text search of one table has two backends: the Rust core's full-text index file
(`FullTextFile`, None while it cannot answer) and the FTS5 statement (`Fts5`, the only place
the query's terms become MATCH syntax). Where both exist the arm's backend is
`Fallback(FullTextFile, Fts5)`; on PostgreSQL FTS5 refuses (FullTextUnavailable), and the
arm's error path answers as it always has.
"""

from __future__ import annotations

import logging
from dataclasses import replace

from cpersona.config import Settings
from cpersona.errors import FullTextUnavailable
from cpersona.fts import search as fts_search
from cpersona.fts.index import FtsIndex
from cpersona.retrieval.candidates import Candidate, from_episode, from_memory
from cpersona.retrieval.channel import Backend, RankedList
from cpersona.retrieval.hydration import Hydration
from cpersona.retrieval.query import render_match
from cpersona.retrieval.recall_query import RecallQuery
from cpersona.storage import Store, search
from cpersona.storage.error_kinds import OperationalError, UnreachableError
from cpersona.timings import stage

log = logging.getLogger("cpersona.recall")


class FullTextFile:
    """The full-text index file: the rows, order and bm25 of FTS5's statement (fts/search.py)."""

    def __init__(self, index: FtsIndex) -> None:
        self.index = index

    def answer(self, query: RecallQuery, reads: Hydration, table: str) -> list[Candidate] | None:
        memories = table == "memories"
        source = query.scope.source_prefix if memories else ""
        terms = list(query.terms)
        ranked = fts_search.ranked(self.index, terms, query.scope, source, query.limit)
        if ranked is None:
            return None
        ids = [i for i, _ in ranked]
        if memories:
            mems = reads.memories(ids)
            return [from_memory(replace(mems[i], bm25=b)) for i, b in ranked if i in mems]
        eps = reads.episodes(ids)
        return [from_episode(replace(eps[i], bm25=b)) for i, b in ranked if i in eps]


class Fts5:
    """SQLite's FTS5 statement over the terms rendered as a MATCH expression."""

    def __init__(self, db: Store) -> None:
        self.db = db

    def answer(self, query: RecallQuery, reads: Hydration, table: str) -> list[Candidate]:
        match, scope = render_match(query.terms), query.scope
        if table == "memories":
            hits = search.memory_fts(self.db, scope, scope.source_prefix, match, query.limit)
            return [from_memory(h) for h in hits]
        return [from_episode(h) for h in search.episode_fts(self.db, scope, match, query.limit)]


#: What a failed search of each table is called in the log, and what happens instead.
_FAILED = {
    "episodes": ("episode", "that channel is empty for this recall"),
    "memories": ("memory", "using the LIKE fallback"),
}


def _full_text(
    backend: Backend[list[Candidate]], query: RecallQuery, reads: Hydration, table: str
) -> list[Candidate] | None:
    """`backend`'s answer; None when the search failed (said in the log)."""
    try:
        return backend.answer(query, reads, table) or []
    except UnreachableError:
        raise  # no channel can answer: the call is refused (server/app.py)
    except (OperationalError, FullTextUnavailable) as exc:
        arm, then = _FAILED[table]
        log.warning("%s FTS failed (%s); %s", arm, exc, then)
        return None


class EpisodeText:
    """The episode full-text channel (§4.6); empty when its search fails."""

    stage = "full_text"

    def __init__(self, backend: Backend[list[Candidate]], settings: Settings) -> None:
        self.backend = backend
        self.enabled = settings.fts_enabled

    def rank(self, query: RecallQuery, reads: Hydration) -> list[RankedList]:
        rows: list[Candidate] | None = []
        if query.episodes and not query.blank:
            with stage(self.stage):
                if self.enabled and query.terms and query.limit > 0:
                    rows = _full_text(self.backend, query, reads, "episodes")
        # Exclusions do not apply to episode hits (§4.10).
        # Last in fusion's tie order: a session's summary gives way to the turn it ties with.
        return [RankedList("episodes", rows=rows or [], excludable=False, ties=2)]


class Keyword:
    """The memory keyword channel (§4.7): full-text search, else (no hit, or the search
    failed) the LIKE fallback; recency for a blank query."""

    stage = "keyword"

    def __init__(self, db: Store, backend: Backend[list[Candidate]], settings: Settings) -> None:
        self.db = db
        self.backend = backend
        self.s = settings

    def rank(self, query: RecallQuery, reads: Hydration) -> list[RankedList]:
        with stage(self.stage):
            return [RankedList("keyword", rows=self._rows(query, reads))]

    def _rows(self, query: RecallQuery, reads: Hydration) -> list[Candidate]:
        limit, scope = query.limit, query.scope
        if limit <= 0:
            return []
        if query.blank:
            recent = search.memory_recent(self.db, scope, scope.source_prefix, limit)
            return [from_memory(h) for h in recent]
        rows: list[Candidate] | None = []
        if self.s.fts_enabled and query.terms:
            rows = _full_text(self.backend, query, reads, "memories")
        if not rows:
            read = min(self.s.max_memories, max(5 * limit, 50))
            hits = search.memory_like(self.db, scope, scope.source_prefix, query.text, read)
            rows = [from_memory(h) for h in hits[:limit]]
        return rows
