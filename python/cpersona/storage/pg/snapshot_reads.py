"""Reads that every read snapshot asks, sent with its BEGIN (one round trip on PostgreSQL).

A recall's snapshot asks the same statements first each time: the vector-model record (to check
that the query's model still holds: storage/vector_models.read) and the snapshot's bounds (for
the change-log horizons: storage/pg/horizons.py). Each ask was a round trip, a fraction of a
millisecond on a quiet server and most of what separated a PostgreSQL recall from an SQLite one
(docs/performance.md). `remembered` asks one once per snapshot; after its first ask anywhere the
database sends it with every later BEGIN through psycopg's pipeline mode (PgConnection.begin),
so inside a snapshot it costs no round trip. Only statements whose answer cannot change inside a
REPEATABLE READ snapshot belong here, and only once they are known to run (their tables exist):
a failing one would abort the snapshot it was sent with.

On SQLite (no snapshot memo) and outside a snapshot, `remembered` is the plain statement.
"""

from __future__ import annotations

from typing import Protocol

from cpersona.storage.interface import Connection
from cpersona.storage.interface import Row as AnyRow


class _Remembers(Protocol):
    """The PostgreSQL reader's side of this (storage/pg/db.py)."""

    @property
    def snapshot_memo(self) -> dict[str, object] | None: ...

    def read_with_begin(self, name: str, sql: str) -> None: ...


def remembered(conn: Connection, name: str, sql: str) -> list[AnyRow]:
    """The rows of `sql` (no parameters), asked at most once per read snapshot."""
    memo: dict[str, object] | None = getattr(conn, "snapshot_memo", None)
    key = f"read:{name}"
    if memo is not None and key in memo:
        return memo[key]  # type: ignore[return-value]
    rows = conn.execute(sql).fetchall()
    if memo is not None:
        memo[key] = rows
        reader: _Remembers = conn  # type: ignore[assignment]
        reader.read_with_begin(name, sql)
    return rows
