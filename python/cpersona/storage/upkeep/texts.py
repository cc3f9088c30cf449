"""SQL of the content checks: memories and profiles whose text a check flags, and the
repairs that rewrite, cut or delete them (an agent scope of "" means every agent)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from cpersona.storage.db import quote_identifier
from cpersona.storage.error_kinds import ConstraintError
from cpersona.storage.upkeep.handle import Conn, scope, scoped_rows, write_by_ids


@dataclass(frozen=True, slots=True)
class MemoryFlag:
    """A memory a check flagged: always its id and lock; the other columns where the query
    reads them ('' / 0 otherwise)."""

    id: int
    locked: bool
    content: str = ""
    agent_id: str = ""
    project_id: str = ""
    channel: str = ""
    n: int = 0  # length(content) where a size check reads it


@dataclass(frozen=True, slots=True)
class Sized:
    id: int
    n: int


def flags(rows: list[Any], columns: str) -> list[MemoryFlag]:
    """`rows` of the SELECT list `columns` (names, or aliases, as in MemoryFlag) as flags."""
    names = [c.split()[-1] for c in columns.split(",")]  # `length(content) AS n` is n
    out = []
    for r in rows:
        v = dict(zip(names, tuple(r), strict=True))
        v.pop("g", None)
        out.append(
            MemoryFlag(
                id=int(v["id"]),
                locked=bool(v["locked"]),
                content=str(v.get("content", "")),
                agent_id=str(v.get("agent_id", "")),
                project_id=str(v.get("project_id", "")),
                channel=str(v.get("channel", "")),
                n=int(v.get("n", 0)),
            )
        )
    return out


def flagged(
    conn: Conn, columns: str, condition: str, params: Sequence[object], agent_id: str = ""
) -> list[MemoryFlag]:
    """The memories `condition` (an SQL WHERE clause) matches, of `agent_id` when one is
    named, by id, as flags of the SELECT list `columns`."""
    where, scoped = scope(agent_id)
    rows = conn.execute(
        f"SELECT {columns} FROM memories WHERE {condition}{where} ORDER BY id", [*params, *scoped]
    ).fetchall()
    return flags(rows, columns)


#: What a check that rewrites or cuts a memory's text reads of it.
_TEXT_FLAG = "id, agent_id, project_id, channel, content, locked"


def memories_containing(conn: Conn, needle: str, agent_id: str) -> list[MemoryFlag]:
    condition = f"{conn.ops.position('?', 'content')} > 0"
    return flagged(conn, _TEXT_FLAG, condition, [needle], agent_id)


def oversized_memories(conn: Conn, cap: int, agent_id: str) -> list[MemoryFlag]:
    columns = f"{_TEXT_FLAG}, length(content) AS n"
    return flagged(conn, columns, "length(content) > ?", [cap], agent_id)


def rewrite_content(conn: Conn, memory_id: int, content: str) -> str:
    """Set a memory's text (its embedding becomes NULL); a row whose new text collides with
    another row's on the content UNIQUE index is deleted instead. Returns what happened."""
    row = conn.execute(
        "SELECT agent_id, project_id, channel FROM memories WHERE id = ?", (memory_id,)
    ).fetchone()
    if row is None:
        return "missing"
    clash = conn.execute(
        "SELECT 1 FROM memories WHERE agent_id = ? AND project_id = ? AND channel = ? "
        "AND content = ? AND id != ?",
        (row[0], row[1], row[2], content, memory_id),
    ).fetchone()
    if clash is not None:
        conn.execute("DELETE FROM memories WHERE id = ? AND locked = 0", (memory_id,))
        return "deleted"
    conn.execute(
        "UPDATE memories SET content = ?, embedding = NULL WHERE id = ? AND locked = 0",
        (content, memory_id),
    )
    return "updated"


def duplicate_groups(conn: Conn, agent_id: str) -> list[list[MemoryFlag]]:
    """Groups of memories sharing (agent_id, project_id, content), across channels."""
    where, params = scope(agent_id, "m.agent_id")
    rows = conn.execute(
        "SELECT m.id, m.agent_id, m.project_id, m.channel, m.locked, d.g FROM memories m JOIN ("
        "  SELECT agent_id, project_id, content, MIN(id) AS g FROM memories"
        "  GROUP BY agent_id, project_id, content HAVING COUNT(*) > 1"
        ") d ON m.agent_id = d.agent_id AND m.project_id = d.project_id AND m.content = d.content"
        f" WHERE 1=1{where} ORDER BY d.g, m.id",
        params,
    ).fetchall()
    groups: dict[int, list[MemoryFlag]] = {}
    for r, flag in zip(
        rows, flags(rows, "id, agent_id, project_id, channel, locked, g"), strict=True
    ):
        groups.setdefault(int(r["g"]), []).append(flag)
    return list(groups.values())


def delete_unlocked_memories(conn: Conn, ids: Sequence[int]) -> int:
    return write_by_ids(conn, "DELETE FROM memories WHERE locked = 0 AND", ids)


def empty_content_rows(conn: Conn, agent_id: str) -> list[MemoryFlag]:
    return flagged(conn, "id, locked", "trim(content) = ''", [], agent_id)


def short_content(conn: Conn, agent_id: str, max_len: int) -> list[MemoryFlag]:
    return flagged(
        conn,
        "id, content, locked",
        "agent_id = ? AND length(trim(content)) <= ?",
        (agent_id, max_len),
    )


def oversized_profiles(conn: Conn, cap: int, agent_id: str) -> list[Sized]:
    where, params = scope(agent_id)
    rows = conn.execute(
        f"SELECT id, length(content) AS n FROM profiles WHERE length(content) > ?{where}",
        [cap, *params],
    ).fetchall()
    return [Sized(int(r[0]), int(r[1])) for r in rows]


def truncate_profiles(conn: Conn, ids: Sequence[int], cap: int) -> int:
    return write_by_ids(
        conn,
        f"UPDATE profiles SET content = substr(content, 1, ?), updated_at = {conn.ops.now()} WHERE",
        ids,
        cap,
    )


def truncate_memories(conn: Conn, ids: Sequence[int], cap: int) -> list[int]:
    """Cut unlocked memories to `cap` characters (NULL embedding); ids that collided on the
    content UNIQUE index once cut are returned (their text is unchanged)."""
    clashed = []
    for row_id in ids:
        try:
            conn.execute("SAVEPOINT cut")
            conn.execute(
                "UPDATE memories SET content = substr(content, 1, ?), embedding = NULL "
                "WHERE id = ? AND locked = 0",
                (cap, row_id),
            )
            conn.execute("RELEASE cut")
        except ConstraintError:
            conn.execute("ROLLBACK TO cut")
            conn.execute("RELEASE cut")
            clashed.append(row_id)
    return clashed


def agents_without_profile(conn: Conn, agent_id: str) -> list[str]:
    where, params = scope(agent_id, "m.agent_id")
    rows = conn.execute(
        "SELECT DISTINCT m.agent_id FROM memories m LEFT JOIN profiles p "
        f"ON p.agent_id = m.agent_id WHERE p.id IS NULL{where} ORDER BY 1",
        params,
    ).fetchall()
    return [str(r[0]) for r in rows]


def id_texts(
    conn: Conn,
    table: str,
    column: str,
    agent_id: str,
    limit: int,
    *,
    where: str = "1=1",
    newest_first: bool = False,
) -> list[tuple[int, str]]:
    """(id, text of `column`) of at most `limit` rows matching `where`, in id order."""
    order = "DESC" if newest_first else "ASC"
    sql = f"SELECT id, {column} FROM {quote_identifier(table)} WHERE {where}{{scope}} "
    sql += f"ORDER BY id {order} LIMIT ?"
    return [(int(r[0]), str(r[1] or "")) for r in scoped_rows(conn, sql, agent_id, limit)]


def newest_texts(
    conn: Conn, table: str, column: str, agent_id: str, limit: int
) -> list[tuple[int, str]]:
    return id_texts(conn, table, column, agent_id, limit, newest_first=True)
