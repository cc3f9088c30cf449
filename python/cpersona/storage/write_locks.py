"""The locks a write tool's transaction takes on PostgreSQL, scoped to what they protect.

Many servers write one PostgreSQL at once (`atomic(exclusive=False)`, storage/pg/db.py), so a
dedup probe and its insert need a lock of their own. surface.md §5.4 probes wider than the
UNIQUE indexes: a write to project P (P != '') is a duplicate of a row in P or in the global
pool '', one to channel C of a row in C or in ''. So the locks are readers-writer locks on the
exact buckets: a store takes its own bucket EXCLUSIVE and every other bucket its probe reads
SHARED. Two stores conflict exactly when one inserts into a bucket the other probes (or both
into one bucket), and stores into unrelated buckets (other agents, sibling projects) do not
wait for each other. A global write ('' ) takes '' exclusive, so it waits for the bucket writes
of that agent that probe '' and they wait for it: the "a bucket write is blocked by a global
copy" rule holds even for two writes at the same moment.

Keys are 64-bit hashes of the bucket (a collision only makes two buckets share a lock: more
waiting, never a missed duplicate). One transaction takes its keys in ascending order, each
once in its strongest mode, so two writers never wait for each other in a cycle. Updates take
the row first (FOR UPDATE) and then its content bucket, the same order everywhere.

SQLite: nothing to take, its BEGIN IMMEDIATE writer is the only one.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

from cpersona.storage.db import is_row_id
from cpersona.storage.interface import Connection
from cpersona.storage.ops import ops_of

#: Tables whose rows `lock_row` may lock.
_ROW_TABLES = ("memories", "episodes")


def _key(*parts: str) -> int:
    """A stable signed 64-bit key for one bucket (the same on every server and release)."""
    digest = hashlib.sha256("\x1f".join(parts).encode("utf-8", "surrogatepass")).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def _buckets(project_id: str, channel: str | None) -> list[tuple[str, ...]]:
    """The exact buckets a probe from (project_id, channel) reads, its own first; channel
    None: the msg_id probe, which ignores the channel."""
    projects = [project_id, ""] if project_id else [""]
    if channel is None:
        return [(p,) for p in projects]
    channels = [channel, ""] if channel else [""]
    return [(p, c) for p in projects for c in channels]


def store_keys(agent_id: str, project_id: str, channel: str, msg_id: str) -> dict[int, bool]:
    """{key: exclusive} of the dedup locks for storing into (agent, project, channel): the
    msg_id buckets (when `msg_id`), the content buckets always."""
    wanted: dict[int, bool] = {}

    def add(kind: str, buckets: list[tuple[str, ...]]) -> None:
        for i, bucket in enumerate(buckets):
            key = _key(kind, agent_id, *bucket)
            wanted[key] = wanted.get(key, False) or i == 0  # the own bucket exclusive

    if msg_id:
        add("msg_id", _buckets(project_id, None))
    add("content", _buckets(project_id, channel))
    return wanted


def content_key(agent_id: str, project_id: str, channel: str) -> dict[int, bool]:
    """The exclusive lock of one content bucket (an update writes new content into it)."""
    return {_key("content", agent_id, project_id, channel): True}


def take(conn: Connection, keys: dict[int, bool]) -> None:
    """Take `keys` ({key: exclusive}) for the rest of the transaction, in ascending order."""
    if ops_of(conn).name != "postgresql" or not keys:
        return
    for key in sorted(keys):
        fn = "pg_advisory_xact_lock" if keys[key] else "pg_advisory_xact_lock_shared"
        conn.execute(f"SELECT {fn}(?)", (key,))


def lock_rows(conn: Connection, table: str, ids: Iterable[int]) -> None:
    """Lock rows for the rest of the transaction (FOR UPDATE): a read-then-write of them
    (lock_memory, delete_episode) sees no other server's change in between."""
    if table not in _ROW_TABLES:
        raise ValueError(f"no row locks for table {table!r}")
    if ops_of(conn).name != "postgresql":
        return
    for row_id in sorted({i for i in ids if is_row_id(i)}):
        conn.execute(f"SELECT 1 FROM {table} WHERE id = ? FOR UPDATE", (row_id,))


def scope_of(conn: Connection, memory_id: int) -> tuple[str, str, str] | None:
    """(agent, project, channel) of a memory, its row locked first on PostgreSQL."""
    lock_rows(conn, "memories", [memory_id])
    row = conn.execute(
        "SELECT agent_id, project_id, channel FROM memories WHERE id = ?", (memory_id,)
    ).fetchone()
    return None if row is None else (str(row[0]), str(row[1]), str(row[2]))
