"""A recall's scalar reads of its scope (storage/search.scope_facts), asked the way that is
cheapest on each backend (retrieval/scope_reads.py uses them).

On PostgreSQL every statement is a round trip, so the reads are one statement of scalar
subqueries, sent with the snapshot's BEGIN when asked for before it (storage/pg/snapshot_reads.py)
and otherwise run on first use. On SQLite a statement costs microseconds and each read is asked
alone when first needed: `PendingScopeFacts.get` answers None there.
"""

from __future__ import annotations

from cpersona.storage import search
from cpersona.storage.interface import Store
from cpersona.storage.pg import snapshot_reads
from cpersona.storage.search import ScopeFacts, ScopeSql


class PendingScopeFacts:
    """`search.scope_facts(db, scope, profile_sql, cap)`, sent with the next read snapshot's
    BEGIN on PostgreSQL (make it before the snapshot opens)."""

    def __init__(self, db: Store, scope: ScopeSql, profile_sql: str, cap: int | None) -> None:
        self._db = db
        self._scope = scope
        self._profile_sql = profile_sql
        self._cap = cap
        self._folded: ScopeFacts | None = None
        self._sent: str | None = None
        self._asks_once = db.dialect == "postgresql"
        if self._asks_once:
            sql, params = search.scope_facts_statement(db, scope, profile_sql, cap)
            self._sent = snapshot_reads.send_with_begin(db.reader(), sql, params)

    def get(self) -> ScopeFacts | None:
        """Every read at once on PostgreSQL (read on first use); None on SQLite."""
        if not self._asks_once:
            return None
        if self._folded is None:
            rows = snapshot_reads.sent_with_begin(self._db.reader(), self._sent)
            self._folded = (
                search.scope_facts_of(rows[0])
                if rows
                else search.scope_facts(self._db, self._scope, self._profile_sql, self._cap)
            )
        return self._folded
