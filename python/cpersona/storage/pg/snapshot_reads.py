"""Reads that every read snapshot asks, sent with its BEGIN (one round trip on PostgreSQL).

A recall's snapshot asks the same statements first each time: the vector-model record (to check
that the query's model still holds: storage/vector_models.read) and the snapshot's bounds (for
the change-log horizons: storage/pg/horizons.py). Each ask was a round trip, a fraction of a
millisecond on a quiet server and most of what separated a PostgreSQL recall from an SQLite one
(docs/notes/performance-notes.md). `remembered` asks one once per snapshot; after its first
ask anywhere the
database sends it with every later BEGIN through psycopg's pipeline mode (PgConnection.begin),
so inside a snapshot it costs no round trip. Only statements whose answer cannot change inside a
REPEATABLE READ snapshot belong here, and only once they are known to run (their tables exist):
a failing one would abort the snapshot it was sent with.

A caller that knows before a snapshot what it will read first in it (recall: its scope's
scalar reads, storage/search.scope_facts) can `send_with_begin` that read for the next BEGIN
only, and take its rows with `sent_with_begin` inside the snapshot.

On SQLite (no snapshot memo) and outside a snapshot, `remembered` is the plain statement.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import count
from typing import Protocol

from cpersona.storage.interface import Connection
from cpersona.storage.interface import Row as AnyRow


class _Remembers(Protocol):
    """The PostgreSQL reader's side of this (storage/pg/db.py)."""

    @property
    def snapshot_memo(self) -> dict[str, object] | None: ...

    @property
    def next_begin(self) -> dict[str, tuple[str, Sequence[object]]]: ...

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


_names = count()


def send_with_begin(conn: Connection, sql: str, params: Sequence[object]) -> str | None:
    """Send `sql` with the next BEGIN of this thread's PostgreSQL reader; the name to take its
    rows by (`sent_with_begin`), or None when no BEGIN is to come (SQLite, or a snapshot is
    open already): then the caller runs the statement itself."""
    if not hasattr(conn, "next_begin") or conn.in_transaction:
        return None
    name = f"once:{next(_names)}"
    reader: _Remembers = conn  # type: ignore[assignment]
    reader.next_begin[name] = (sql, params)
    return name


def sent_with_begin(conn: Connection, name: str | None) -> list[AnyRow] | None:
    """The rows of what `send_with_begin` named, inside the snapshot it began; else None."""
    memo: dict[str, object] | None = getattr(conn, "snapshot_memo", None)
    if name is None or memo is None:
        return None
    return memo.get(f"read:{name}")  # type: ignore[return-value]
