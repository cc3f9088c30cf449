"""SQL for the `memories` table. Returns `models.Memory`, never rows."""

from __future__ import annotations

from collections.abc import Sequence

from cpersona.models import Memory, NewMemory
from cpersona.storage.db import embedding_param, id_batches, is_row_id, row_params
from cpersona.storage.interface import Connection, Row, Store
from cpersona.storage.row_access import RowAccess
from cpersona.storage.rows import MemoryRow, build, insert_sql, projection

#: The listing's row (`models.Memory`): every column but the embedding, and whether it has one.
_COLUMNS = projection(Memory, MemoryRow, {"embedded": "embedding IS NOT NULL"}).select_list()
#: What `store` writes (`models.NewMemory`); the database fills in the rest.
_WRITTEN = projection(NewMemory, MemoryRow).names
_INSERT = insert_sql("memories", _WRITTEN, "ON CONFLICT DO NOTHING RETURNING id")


def _memory(row: Row) -> Memory:
    return build(Memory, row)


_ROWS = RowAccess("memories", _COLUMNS, _memory, deletable="locked = 0")
get = _ROWS.get
fetch = _ROWS.fetch
delete = _ROWS.delete  # locked rows are kept
list_newest = _ROWS.list_newest


def _probe_project(project_id: str) -> tuple[str, tuple[str, ...]]:
    # A bucket write is blocked by a global copy; a global write probes the global pool only.
    if project_id:
        return "project_id IN (?, '')", (project_id,)
    return "project_id = ''", ()


def find_msg_id_duplicate(
    conn: Connection, agent_id: str, project_id: str, msg_id: str
) -> int | None:
    """Id of a row with this msg_id (never '') in the probe scope (channel ignored), or None.

    `msg_id <> ''` changes no answer but the plan PostgreSQL caches: where most rows have no
    msg_id, the generic plan of `msg_id = $n ... ORDER BY id LIMIT 1` walked the primary key
    over the agent's rows (2.3 s at 1,000,000 rows, from the sixth store of a connection on),
    and with the term it reads the msg_id index (0.03 ms; docs/notes/performance-notes.md, 1,000,000
    memories on PostgreSQL)."""
    where, params = _probe_project(project_id)
    row = conn.execute(
        f"SELECT id FROM memories WHERE agent_id = ? AND {where} AND msg_id = ? "
        "AND msg_id <> '' ORDER BY id LIMIT 1",
        (agent_id, *params, msg_id),
    ).fetchone()
    return None if row is None else int(row[0])


def find_content_duplicate(
    conn: Connection, agent_id: str, project_id: str, channel: str, content: str
) -> int | None:
    """Id of a row with this exact content in the probe scope, or None."""
    where, params = _probe_project(project_id)
    cparams: tuple[str, ...]
    if channel:
        chan, cparams = "channel IN (?, '')", (channel,)
    else:
        chan, cparams = "channel = ''", ()
    row = conn.execute(
        f"SELECT id FROM memories WHERE agent_id = ? AND {where} AND {chan} AND content = ? "
        "ORDER BY id LIMIT 1",
        (agent_id, *params, *cparams, content),
    ).fetchone()
    return None if row is None else int(row[0])


def insert(conn: Connection, new: NewMemory) -> int | None:
    """The new row id, or None when a UNIQUE index absorbed it."""
    cur = conn.execute(_INSERT, row_params(conn, new, _WRITTEN))
    rows = cur.fetchall()  # to the end: SQLite finishes an INSERT ... RETURNING only then
    return int(rows[0][0]) if rows else None


def get_many(db: Store, ids: Sequence[int], agent_id: str | None = None) -> dict[int, Memory]:
    """Rows by id (batches of 500), optionally only those of one agent."""
    found: dict[int, Memory] = {}
    for batch, marks in id_batches([i for i in ids if is_row_id(i)]):
        sql = f"SELECT {_COLUMNS} FROM memories WHERE id IN ({marks})"
        params: list[object] = list(batch)
        if agent_id is not None:
            sql += " AND agent_id = ?"
            params.append(agent_id)
        for row in db.query(sql, params):
            found[row["id"]] = _memory(row)
    return found


def update_content(conn: Connection, memory_id: int, content: str, embedding: bytes | None) -> int:
    """Replace content and embedding of an unlocked row; the number of rows changed."""
    if not is_row_id(memory_id):
        return 0
    cur = conn.execute(
        "UPDATE memories SET content = ?, embedding = ? WHERE id = ? AND locked = 0",
        (content, embedding_param(conn, embedding), memory_id),
    )
    return cur.rowcount


def set_locked(conn: Connection, memory_id: int, locked: bool) -> int:
    if not is_row_id(memory_id):
        return 0
    cur = conn.execute(
        "UPDATE memories SET locked = ? WHERE id = ?", (1 if locked else 0, memory_id)
    )
    return cur.rowcount


def search_fts(db: Store, match: str, agent_id: str, limit: int) -> list[Memory]:
    """Rows of one agent whose content matches an FTS5 expression, best bm25 first."""
    if db.dialect != "sqlite":
        return []  # no FTS5 on PostgreSQL
    cols = ", ".join(f"m.{c.strip()}" for c in _COLUMNS.split(",")[:-1])
    rows = db.query(
        f"""SELECT {cols}, m.embedding IS NOT NULL AS embedded
            FROM memories_fts JOIN memories m ON m.id = memories_fts.rowid
            WHERE memories_fts MATCH ? AND m.agent_id = ?
            ORDER BY bm25(memories_fts), m.id LIMIT ?""",
        (match, agent_id, limit),
    )
    return [_memory(row) for row in rows]
