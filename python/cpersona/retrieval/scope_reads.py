"""The scalar reads one recall makes of its scope inside its snapshot: the agent's profile, the
newest episode's time (the penalty boundary), and, when the scope-stats cache has none, the
capped pool count and the timestamp span (retrieval.md §6-7).

On SQLite each is its own statement, asked when first needed (microseconds each). On
PostgreSQL each statement is a round trip (a fraction of a millisecond, several under load),
so they are one statement of scalar subqueries (storage/scope_facts.py), sent with the
snapshot's BEGIN when the reads are made before it, else asked on first use: inside one
REPEATABLE READ snapshot the answers are the ones the separate statements would give, whenever
each is asked.
"""

from __future__ import annotations

from cpersona.retrieval.hydration import Hydration
from cpersona.storage import Store, search
from cpersona.storage import profiles as profile_sql
from cpersona.storage.scan_request import Scope
from cpersona.storage.scope_facts import PendingScopeFacts
from cpersona.storage.search import ScopeFacts

Stats = tuple[int, tuple[str | None, str | None]]


class ScopeReads:
    """One recall's reads of `scope` (see the module docstring), and of its rows by id
    (`rows`, memories also by the scope's source prefix). `stats_cap`: the pool cap when the
    pool and span will be needed (the cache has none), else None. Made before the recall's
    snapshot, so that on PostgreSQL the scalar reads go with its BEGIN."""

    def __init__(self, db: Store, scope: Scope, stats_cap: int | None) -> None:
        self.rows = Hydration(db, scope)
        self._db = db
        self._scope = scope
        self._cap = stats_cap
        self._pending = PendingScopeFacts(db, scope, profile_sql.GET, stats_cap)

    def _facts(self) -> ScopeFacts | None:
        """Every read at once on PostgreSQL (read on first use); None on SQLite."""
        return self._pending.get()

    def profile(self) -> str | None:
        facts = self._facts()
        return profile_sql.get(self._db, self._scope.agent_id) if facts is None else facts.profile

    def latest_episode_created(self) -> str | None:
        facts = self._facts()
        if facts is None:
            return search.latest_episode_created(self._db, self._scope)
        return facts.latest_episode

    def stats(self, cap: int) -> Stats:
        """The pool capped at `cap` and the timestamp span (read alone when the first read
        did not include them: the cache entry expired since)."""
        facts = self._facts()
        if facts is not None and facts.stats is not None and self._cap == cap:
            return facts.stats
        pool = search.pool_count(self._db, self._scope, cap=cap)
        return pool, search.timestamp_span(self._db, self._scope)
