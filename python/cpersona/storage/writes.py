"""The write tools' transactions: each function opens its own and returns plain values.

`memory/writes.py` owns the rules (sanitising, embedding before the transaction, response
shapes); these functions own the one transaction each write must be, so a dedup probe and
its insert, or a vector's admission and the row it goes into, can never be split by another
writer: BEGIN IMMEDIATE on SQLite; on PostgreSQL `atomic(exclusive=False)`, which runs beside
other servers' writes, plus the locks of what each write touches (storage/write_locks.py: the
dedup buckets of a store, the row of an update, lock or delete). Inserts of episodes and the
profile upsert (one row per agent, `INSERT ... ON CONFLICT`) need no lock of their own.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Literal

from cpersona.models import Episode, Memory, NewEpisode, NewMemory
from cpersona.storage import episodes as episode_sql
from cpersona.storage import memories as memory_sql
from cpersona.storage import profiles as profile_sql
from cpersona.storage import vector_models
from cpersona.storage import write_locks as locks
from cpersona.storage.error_kinds import translating
from cpersona.storage.interface import Store


@dataclass(frozen=True, slots=True)
class Vector:
    """A computed vector (little-endian float32 bytes) and the model that made it."""

    blob: bytes
    model: str
    dim: int


@dataclass(frozen=True, slots=True)
class Duplicate:
    """The row a store would duplicate, and which rule found it."""

    reason: Literal["duplicate msg_id", "duplicate content"]
    id: int


@dataclass(frozen=True, slots=True)
class Stored:
    """What `store_memory` did: a duplicate found, the row absorbed by a UNIQUE index
    (`id` None), or the new row's id and whether its vector went in with it."""

    duplicate: Duplicate | None
    id: int | None
    embedded: bool


def _admit(conn: vector_models.Conn, table: str, vec: Vector | None) -> bytes | None:
    """Inside the write transaction: the BLOB to write, or None when `table`'s vectors
    became another model's since `vec` was computed (a conversion cut over meanwhile)."""
    if vec is None:
        return None
    owner = vector_models.claim(conn, table, vec.model, vec.dim)
    return vec.blob if owner in (vec.model, "") else None


def _probe(
    conn: vector_models.Conn,
    agent_id: str,
    project_id: str,
    channel: str,
    msg_id: str,
    content: str,
) -> Duplicate | None:
    if msg_id:
        found = memory_sql.find_msg_id_duplicate(conn, agent_id, project_id, msg_id)
        if found is not None:
            return Duplicate("duplicate msg_id", found)
    found = memory_sql.find_content_duplicate(conn, agent_id, project_id, channel, content)
    if found is not None:
        return Duplicate("duplicate content", found)
    return None


@translating
def find_duplicate(db: Store, new: NewMemory) -> Duplicate | None:
    """The store dedup probe outside any transaction (a duplicate then costs no embedding)."""
    return _probe(db.reader(), new.agent_id, new.project_id, new.channel, new.msg_id, new.content)


@translating
def store_memory(db: Store, new: NewMemory, vec: Vector | None) -> Stored:
    """Probe for a duplicate and insert in one write transaction, holding the dedup buckets'
    locks, so that of two servers storing one msg_id or one content at once, one inserts and
    the other waits and finds its row."""
    with db.atomic(exclusive=False) as conn:
        locks.take(conn, locks.store_keys(new.agent_id, new.project_id, new.channel, new.msg_id))
        dup = _probe(conn, new.agent_id, new.project_id, new.channel, new.msg_id, new.content)
        if dup is not None:
            return Stored(dup, None, False)
        embedding = _admit(conn, "memories", vec)
        new_id = memory_sql.insert(conn, dataclasses.replace(new, embedding=embedding))
    return Stored(None, new_id, embedding is not None)


@translating
def fill_late_vector(db: Store, table: str, row_id: int, text: str, vec: Vector) -> bool:
    """Give a row committed without its vector `vec`, if the table takes that model and the
    row's text is still `text`; whether it did."""
    with db.atomic(exclusive=False) as conn:  # one UPDATE: its row lock is enough
        if _admit(conn, table, vec) is None:
            return False
        return vector_models.fill_vector(conn, table, row_id, text, vec.blob) == 1


@translating
def update_memory(db: Store, memory_id: int, text: str, vec: Vector | None) -> tuple[int, bool]:
    """Replace an unlocked row's content (and vector): (rows changed, vector written).
    Raises ConstraintError when another row of the scope already has exactly this text."""
    with db.atomic(exclusive=False) as conn:
        # The row, then its content bucket: a store probing that bucket waits for the new text.
        scope = locks.scope_of(conn, memory_id)
        if scope is not None:
            locks.take(conn, locks.content_key(*scope))
        embedding = _admit(conn, "memories", vec)
        changed = memory_sql.update_content(conn, memory_id, text, embedding)
    return changed, embedding is not None


@translating
def delete_memory(db: Store, memory_id: int, agent_id: str | None) -> int:
    """Delete an unlocked row (of `agent_id` when given); rows deleted."""
    with db.atomic(exclusive=False) as conn:
        return memory_sql.delete(conn, memory_id, agent_id)


@translating
def lock_memory(db: Store, memory_id: int, agent_id: str, locked: bool) -> Memory | None:
    """Set the lock of a row owned by `agent_id` (any row when it is ''), reading and
    writing in one transaction; the row as it was, or None when it does not exist (a row of
    another agent is returned unchanged)."""
    with db.atomic(exclusive=False) as conn:
        locks.lock_rows(conn, "memories", [memory_id])  # the row returned is the row changed
        current = memory_sql.get(conn, memory_id)
        if current is not None and (not agent_id or current.agent_id == agent_id):
            memory_sql.set_locked(conn, memory_id, locked)
        return current


@translating
def insert_episode(db: Store, new: NewEpisode, vec: Vector | None) -> tuple[int, bool]:
    """Insert an episode: (its id, vector written)."""
    with db.atomic(exclusive=False) as conn:
        embedding = _admit(conn, "episodes", vec)
        episode_id = episode_sql.insert(conn, dataclasses.replace(new, embedding=embedding))
    return episode_id, embedding is not None


@translating
def delete_episode(
    db: Store, episode_id: int, agent_id: str | None, *, read_owner: bool
) -> tuple[int, Episode | None]:
    """Delete an episode (of `agent_id` when given): (rows deleted, the row as read in the
    deleting transaction when `read_owner`, else None)."""
    with db.atomic(exclusive=False) as conn:
        if read_owner:
            locks.lock_rows(conn, "episodes", [episode_id])
        owner = episode_sql.get(conn, episode_id) if read_owner else None
        return episode_sql.delete(conn, episode_id, agent_id), owner


@translating
def upsert_profile(db: Store, agent_id: str, text: str) -> None:
    with db.atomic(exclusive=False) as conn:
        profile_sql.upsert(conn, agent_id, text)
