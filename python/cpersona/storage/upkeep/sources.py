"""SQL of the JSON checks: memory `source` and `metadata` texts that are not JSON, sources
without a canonical type, and the anonymous-User sentinel rows."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from cpersona.storage.ops import SqlOps
from cpersona.storage.upkeep.handle import Conn, scope, set_unlocked, write_by_ids
from cpersona.storage.upkeep.texts import MemoryFlag, flagged


@dataclass(frozen=True, slots=True)
class JsonFlag:
    id: int
    locked: bool
    source_ok: bool
    meta_ok: bool


@dataclass(frozen=True, slots=True)
class SourceRow:
    id: int
    source: str
    locked: bool


def _sentinel(ops: SqlOps) -> str:
    """The condition of the anonymous User sentinel: a `User` source with no id or name."""
    return (
        f"{ops.json_text('source', 'type')} = 'User' "
        f"AND COALESCE({ops.json_text('source', 'id')}, '') = '' "
        f"AND COALESCE({ops.json_text('source', 'name')}, '') = ''"
    )


def invalid_json_rows(conn: Conn, agent_id: str) -> list[JsonFlag]:
    where, params = scope(agent_id)
    source_ok, meta_ok = conn.ops.json_valid("source"), conn.ops.json_valid("metadata")
    rows = conn.execute(
        f"SELECT id, locked, {source_ok} AS source_ok, {meta_ok} AS meta_ok "
        f"FROM memories WHERE (NOT {source_ok} OR NOT {meta_ok}){where}",
        params,
    ).fetchall()
    return [JsonFlag(int(r[0]), bool(r[1]), bool(r[2]), bool(r[3])) for r in rows]


def reset_json(conn: Conn, ids: Sequence[int]) -> int:
    return write_by_ids(
        conn,
        "UPDATE memories SET "
        f"source = CASE WHEN {conn.ops.json_valid('source')} THEN source ELSE '{{}}' END, "
        f"metadata = CASE WHEN {conn.ops.json_valid('metadata')} THEN metadata "
        "ELSE '{}' END WHERE locked = 0 AND",
        ids,
    )


def untyped_sources(conn: Conn, agent_id: str) -> list[SourceRow]:
    """Valid-JSON sources whose `type` is missing or not canonical (not `{}` or `null`)."""
    where, params = scope(agent_id)
    # The member as text is NULL unless the source is an object holding it; a `type` that is
    # not a JSON string never reads as one of the three names (its text is quoted or a number).
    kind = conn.ops.json_text("source", "type")
    rows = conn.execute(
        f"SELECT id, source, locked FROM memories WHERE {conn.ops.json_valid('source')} "
        "AND source NOT IN ('{}', 'null') AND trim(source) NOT IN ('{}', 'null') AND "
        f"({kind} IS NULL OR {kind} NOT IN ('User', 'Agent', 'System'))"
        f"{where} ORDER BY id",
        params,
    ).fetchall()
    return [SourceRow(int(r[0]), str(r[1]), bool(r[2])) for r in rows]


def set_sources(conn: Conn, rows: Sequence[tuple[int, str]]) -> int:
    return set_unlocked(conn, "source", rows)


def anonymous_sources(conn: Conn, agent_id: str) -> tuple[int, int]:
    """(rows with the anonymous User sentinel, rows with `{}` / `null` / empty sources)."""
    where, params = scope(agent_id)
    row = conn.execute(
        f"SELECT SUM(CASE WHEN {_sentinel(conn.ops)} THEN 1 ELSE 0 END), "
        "SUM(CASE WHEN trim(source) IN ('{}', 'null', '') THEN 1 ELSE 0 END) "
        f"FROM memories WHERE 1=1{where}",
        params,
    ).fetchone()
    return int(row[0] or 0), int(row[1] or 0)


def sentinel_rows(conn: Conn, agent_id: str) -> list[MemoryFlag]:
    return flagged(
        conn, "id, content, locked", f"agent_id = ? AND {_sentinel(conn.ops)}", (agent_id,)
    )


def set_source(conn: Conn, memory_id: int, source: str) -> int:
    cur = conn.execute(
        "UPDATE memories SET source = ? WHERE id = ? AND locked = 0", (source, memory_id)
    )
    return int(cur.rowcount)
