"""SQL of `cpersona_meta`'s free-form entries: one value (bytes) per text key.

`read(db)` gives the entries as the database holds them now; `edit(db)` inside one write
transaction (the database's write lock: BEGIN IMMEDIATE on SQLite, the maintenance lock held
exclusive on PostgreSQL), so a read-merge-write is atomic across every process on the database.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from cpersona.storage.interface import Connection, Store


class Entries:
    """The `cpersona_meta` entries seen through one connection."""

    def __init__(self, conn: Connection) -> None:
        self._conn = conn

    def get(self, key: str) -> bytes | None:
        row = self._conn.execute("SELECT value FROM cpersona_meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else bytes(row[0])

    def keys(self, prefix: str) -> list[str]:
        """Every key that starts with `prefix` (compared as text: no pattern characters)."""
        rows = self._conn.execute(
            "SELECT key FROM cpersona_meta WHERE substr(key, 1, ?) = ? ORDER BY key",
            (len(prefix), prefix),
        ).fetchall()
        return [str(r[0]) for r in rows]

    def put(self, key: str, value: bytes) -> None:
        self._conn.execute(
            "INSERT INTO cpersona_meta(key, value) VALUES (?, ?) ON CONFLICT(key) "
            "DO UPDATE SET value = excluded.value",
            (key, value),
        )

    def delete(self, key: str) -> None:
        self._conn.execute("DELETE FROM cpersona_meta WHERE key = ?", (key,))


def read(db: Store) -> Entries:
    return Entries(db.reader())


@contextmanager
def edit(db: Store) -> Iterator[Entries]:
    """The entries inside one write transaction, committed when the block ends."""
    with db.atomic() as conn:
        yield Entries(conn)
