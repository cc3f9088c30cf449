"""SQL behind export, import, merge and delete_agent_data (surface.md §4.9, §8), and `Rows`,
the unit of work of every portability service (the channel migration's too).

Rows cross into `portability/` as the full-row records below (embedding included), never as
tuples. Dedup here is the *exact-bucket* probe of import and merge (surface.md §8.2-8.3), not
the wider γ-visible probe of `store` (storage/memories.py).

The SQL is written once for both backends; the fragments that differ (the time now) come from
the connection's operations (storage/ops.py). The channel migration's SQL is
storage/channel_axis.py.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TypeVar

from cpersona.storage import association_graph, vector_models
from cpersona.storage.channel_axis import (
    ChannelReport,
    channel_report,
    globalize_unrecoverable,
    rechannel_recoverable,
)
from cpersona.storage.db import id_batches, row_params
from cpersona.storage.error_kinds import translated, translating
from cpersona.storage.interface import Connection, Cursor, Row, Store
from cpersona.storage.ops import ops_of
from cpersona.storage.rows import (
    TABLE,
    EpisodeRow,
    MemoryRow,
    ProfileRow,
    build,
    columns,
    insert_sql,
    select_list,
)

T = TypeVar("T")

#: Rows fetched per round trip when streaming a table, and ids bound per DELETE.
PAGE = 500


#: Every column of one row (storage/rows.py); `id` is the source row's id, ignored on insert.
MemoryRecord = MemoryRow
EpisodeRecord = EpisodeRow
ProfileRecord = ProfileRow


@dataclass(frozen=True, slots=True)
class AgentRows:
    """How many rows of each kind one agent holds (or a delete removed)."""

    memories: int
    episodes: int
    profiles: int
    pending_tasks: int = 0


# -- snapshots ---------------------------------------------------------------------------------


@contextmanager
def read_snapshot(db: Store) -> Iterator[Connection]:
    """This thread's reader inside `db.snapshot()`: every statement sees one snapshot."""
    with db.snapshot() as conn:
        yield conn


def _agent(agent_id: str | None, column: str = "agent_id") -> tuple[str, tuple[str, ...]]:
    return (f"{column} = ?", (agent_id,)) if agent_id is not None else ("TRUE", ())


def count_rows(conn: Connection, agent_id: str | None) -> AgentRows:
    """Memories, episodes and profiles of one agent (None = all agents)."""
    where, params = _agent(agent_id)
    counts = [
        int(conn.execute(f"SELECT COUNT(*) FROM {table} WHERE {where}", params).fetchone()[0])
        for table in ("memories", "episodes", "profiles")
    ]
    return AgentRows(*counts)


# -- streaming reads ---------------------------------------------------------------------------

# Every column but the embedding, which is read only when asked for.
_MEMORY_COLUMNS = select_list(tuple(c for c in columns(MemoryRow) if c != "embedding"))
_EPISODE_COLUMNS = select_list(tuple(c for c in columns(EpisodeRow) if c != "embedding"))
_PROFILE_COLUMNS = select_list(columns(ProfileRow))


def _blob(row: Row, with_embedding: bool) -> bytes | None:
    blob = row["embedding"] if with_embedding else None
    return bytes(blob) if blob is not None else None


def _memory(row: Row, with_embedding: bool) -> MemoryRecord:
    return build(
        MemoryRecord,
        row,
        recall_count=int(row["recall_count"] or 0),
        embedding=_blob(row, with_embedding),
    )


def _episode(row: Row, with_embedding: bool) -> EpisodeRecord:
    return build(EpisodeRecord, row, embedding=_blob(row, with_embedding))


def _profile(row: Row) -> ProfileRecord:
    return build(ProfileRecord, row)


def _pages(conn: Connection, table: str, columns: str, agent_id: str | None) -> Iterator[Row]:
    # Keyset pages by id: a page never re-reads or skips rows however the table is written in
    # between (merge inserts the target's rows while it reads the source's).
    where, params = _agent(agent_id)
    last = -(2**63)
    while True:
        rows = conn.execute(
            f"SELECT {columns} FROM {table} WHERE {where} AND id > ? ORDER BY id LIMIT ?",
            (*params, last, PAGE),
        ).fetchall()
        if not rows:
            return
        yield from rows
        last = rows[-1]["id"]


def iter_memories(
    conn: Connection, agent_id: str | None, *, with_embeddings: bool
) -> Iterator[MemoryRecord]:
    """Memories of one agent (None = all) by id; embeddings only when asked for."""
    return _records(conn, "memories", _MEMORY_COLUMNS, _memory, agent_id, with_embeddings)


def iter_episodes(
    conn: Connection, agent_id: str | None, *, with_embeddings: bool
) -> Iterator[EpisodeRecord]:
    return _records(conn, "episodes", _EPISODE_COLUMNS, _episode, agent_id, with_embeddings)


def _records(
    conn: Connection,
    table: str,
    columns: str,
    read: Callable[[Row, bool], T],
    agent_id: str | None,
    with_embeddings: bool,
) -> Iterator[T]:
    columns += ", embedding" if with_embeddings else ""
    for row in _pages(conn, table, columns, agent_id):
        yield read(row, with_embeddings)


def iter_profiles(conn: Connection, agent_id: str | None) -> Iterator[ProfileRecord]:
    """Profiles by agent_id (then user_id): the export order of surface.md §8.1."""
    where, params = _agent(agent_id)
    cur = conn.execute(
        f"SELECT {_PROFILE_COLUMNS} FROM profiles WHERE {where} ORDER BY agent_id, user_id, id",
        params,
    )
    while rows := cur.fetchmany(PAGE):
        yield from (_profile(r) for r in rows)


# -- exact-bucket dedup probes -----------------------------------------------------------------


def _exists(conn: Connection, table: str, **equal: str) -> bool:
    """Whether `table` has a row whose columns equal these values."""
    where = " AND ".join(f"{column} = ?" for column in equal)
    row = conn.execute(f"SELECT 1 FROM {table} WHERE {where} LIMIT 1", tuple(equal.values()))
    return row.fetchone() is not None


def memory_exists(
    conn: Connection,
    agent_id: str,
    project_id: str,
    channel: str,
    msg_id: str,
    content: str,
) -> bool:
    """A row in exactly this bucket with this msg_id (if any) or this exact content."""
    bucket = {"agent_id": agent_id, "project_id": project_id}
    if msg_id and _exists(conn, "memories", **bucket, msg_id=msg_id):
        return True
    return _exists(conn, "memories", **bucket, channel=channel, content=content)


def episode_exists(
    conn: Connection, agent_id: str, project_id: str, channel: str, summary: str
) -> bool:
    bucket = {"agent_id": agent_id, "project_id": project_id, "channel": channel}
    return _exists(conn, "episodes", **bucket, summary=summary)


def profile_exists(conn: Connection, agent_id: str, user_id: str) -> bool:
    return _exists(conn, "profiles", agent_id=agent_id, user_id=user_id)


# -- writes --------------------------------------------------------------------------------------


#: Every column of a row but its id (a source row's id is ignored on insert).
_WRITTEN = {row: tuple(c for c in columns(row) if c != "id") for row in TABLE}


def _insert(conn: Connection, rec: object, tail: str, stamp: str = "created_at") -> Cursor:
    # A record's stamp is kept; one it leaves to the database is the time now.
    names = _WRITTEN[type(rec)]
    now = {stamp: f"COALESCE(?, {ops_of(conn).now()})"}
    sql = insert_sql(TABLE[type(rec)], names, tail, now)
    return conn.execute(sql, row_params(conn, rec, names))


def insert_memory(conn: Connection, rec: MemoryRecord) -> int | None:
    """Insert every column; the new id, or None when a UNIQUE index absorbed it."""
    rows = _insert(conn, rec, "ON CONFLICT DO NOTHING RETURNING id").fetchall()
    return int(rows[0][0]) if rows else None


def insert_episode(conn: Connection, rec: EpisodeRecord) -> int:
    return int(_insert(conn, rec, "RETURNING id").fetchall()[0][0])


def upsert_profile(conn: Connection, rec: ProfileRecord) -> None:
    """Import's profile write: insert, or overwrite the one of the same (agent_id, user_id)."""
    tail = """ON CONFLICT(agent_id, user_id) DO UPDATE SET
               content = excluded.content,
               project_id = excluded.project_id,
               updated_at = excluded.updated_at"""
    _insert(conn, rec, tail, "updated_at")


def insert_profile(conn: Connection, rec: ProfileRecord) -> None:
    """Merge's profile write: a new row stamped now (the caller checked it does not exist)."""
    conn.execute(
        "INSERT INTO profiles (agent_id, project_id, user_id, content, updated_at) "
        f"VALUES (?, ?, ?, ?, {ops_of(conn).now()})",
        (rec.agent_id, rec.project_id, rec.user_id, rec.content),
    )


_TABLES = {"memories": "memories", "episodes": "episodes", "profiles": "profiles"}


def delete_ids(conn: Connection, table: str, agent_id: str, ids: Sequence[int]) -> int:
    """Delete these rows of one agent (locked ones too); the number removed."""
    name = _TABLES[table]
    removed = 0
    for batch, marks in id_batches(ids, PAGE):
        cur = conn.execute(
            f"DELETE FROM {name} WHERE agent_id = ? AND id IN ({marks})", (agent_id, *batch)
        )
        removed += cur.rowcount
    return removed


def delete_pending_tasks(conn: Connection, agent_id: str) -> int:
    return conn.execute("DELETE FROM pending_memory_tasks WHERE agent_id = ?", (agent_id,)).rowcount


def delete_agent(conn: Connection, agent_id: str) -> AgentRows:
    """Every row of one agent in every project and channel, locked memories included."""
    memories = conn.execute("DELETE FROM memories WHERE agent_id = ?", (agent_id,)).rowcount
    episodes = conn.execute("DELETE FROM episodes WHERE agent_id = ?", (agent_id,)).rowcount
    profiles = conn.execute("DELETE FROM profiles WHERE agent_id = ?", (agent_id,)).rowcount
    # The agent's declared associations (issue 32): its rows' triggers took the mentions and
    # relations naming them; its entities and entity -> entity relations go here.
    association_graph.delete_agent(conn, agent_id)
    return AgentRows(memories, episodes, profiles, delete_pending_tasks(conn, agent_id))


# -- the unit of work the portability services use ---------------------------------------------


class Rows:
    """The operations above on one snapshot or one write transaction that `snapshot` or
    `transaction` opened: the services run their dedup rules over it and never see a
    connection."""

    __slots__ = ("_conn",)

    def __init__(self, conn: Connection) -> None:
        self._conn = conn

    def count_rows(self, agent_id: str | None) -> AgentRows:
        return count_rows(self._conn, agent_id)

    def iter_memories(
        self, agent_id: str | None, *, with_embeddings: bool = False
    ) -> Iterator[MemoryRecord]:
        return iter_memories(self._conn, agent_id, with_embeddings=with_embeddings)

    def iter_episodes(
        self, agent_id: str | None, *, with_embeddings: bool = False
    ) -> Iterator[EpisodeRecord]:
        return iter_episodes(self._conn, agent_id, with_embeddings=with_embeddings)

    def iter_profiles(self, agent_id: str | None) -> Iterator[ProfileRecord]:
        return iter_profiles(self._conn, agent_id)

    def memory_exists(
        self, agent_id: str, project_id: str, channel: str, msg_id: str, content: str
    ) -> bool:
        return memory_exists(self._conn, agent_id, project_id, channel, msg_id, content)

    def episode_exists(self, agent_id: str, project_id: str, channel: str, summary: str) -> bool:
        return episode_exists(self._conn, agent_id, project_id, channel, summary)

    def profile_exists(self, agent_id: str, user_id: str) -> bool:
        return profile_exists(self._conn, agent_id, user_id)

    def insert_memory(self, rec: MemoryRecord) -> int | None:
        return insert_memory(self._conn, rec)

    def insert_episode(self, rec: EpisodeRecord) -> int:
        return insert_episode(self._conn, rec)

    def upsert_profile(self, rec: ProfileRecord) -> None:
        upsert_profile(self._conn, rec)

    def insert_profile(self, rec: ProfileRecord) -> None:
        insert_profile(self._conn, rec)

    def delete_ids(self, table: str, agent_id: str, ids: Sequence[int]) -> int:
        return delete_ids(self._conn, table, agent_id, ids)

    def delete_pending_tasks(self, agent_id: str) -> int:
        return delete_pending_tasks(self._conn, agent_id)

    def read_graph(self, agent_id: str | None) -> association_graph.Graph:
        """The declared associations of `agent_id` (None: every agent's), issue 32."""
        return association_graph.read_graph(self._conn, agent_id)

    def carry_graph(
        self,
        graph: association_graph.Graph,
        ref_map: dict[str, str],
        *,
        agent_id: str | None = None,
        dry_run: bool = False,
    ) -> association_graph.Carried:
        """Write `graph` with its record refs mapped through `ref_map` (association_graph)."""
        conn = self._conn
        return association_graph.carry(conn, graph, ref_map, agent_id=agent_id, dry_run=dry_run)

    def delete_graph(self, agent_id: str) -> dict[str, int]:
        return association_graph.delete_agent(self._conn, agent_id)

    def vector_models(self) -> dict[str, vector_models.Recorded]:
        """The model of each table's vectors, as recorded (in this snapshot)."""
        return vector_models.recorded(self._conn)

    def claim_vectors(self, table: str, model: str, dim: int | None) -> bool:
        """Inside a write transaction: whether `table` takes vectors of `model` now (a table
        without vectors is claimed for it, as a store's first vector claims it)."""
        return vector_models.claim(self._conn, table, model, dim) in (model, "")

    def channel_report(
        self, agent_id: str | None, *, sample: int = 5, invalid_ids: int = 10
    ) -> ChannelReport:
        return channel_report(self._conn, agent_id, sample=sample, invalid_ids=invalid_ids)

    def rechannel_recoverable(self, agent_id: str | None) -> int:
        return rechannel_recoverable(self._conn, agent_id)

    def globalize_unrecoverable(self, agent_id: str | None) -> int:
        return globalize_unrecoverable(self._conn, agent_id)


@contextmanager
def snapshot(db: Store) -> Iterator[Rows]:
    """Read-only `Rows` over one snapshot; driver errors in the block leave it translated."""
    with translated(), read_snapshot(db) as conn:
        yield Rows(conn)


@contextmanager
def transaction(db: Store) -> Iterator[Rows]:
    """`Rows` in one write transaction: committed when the block ends, rolled back (and the
    error re-raised, translated when it is the driver's) when it raises."""
    with translated(), db.atomic() as conn:
        yield Rows(conn)


@translating
def delete_agent_rows(db: Store, agent_id: str) -> AgentRows:
    """Delete every row of one agent in one write transaction."""
    with db.atomic() as conn:
        return delete_agent(conn, agent_id)
