"""SQL of the JSON checks: memory `source` and `metadata` texts that are not JSON, sources
without a canonical type, and the anonymous-User sentinel rows."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from cpersona.storage.upkeep.handle import Conn, chunks, ids_clause, scope
from cpersona.storage.upkeep.texts import MemoryFlag, flags


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


def invalid_json_rows(conn: Conn, agent_id: str) -> list[JsonFlag]:
    where, params = scope(agent_id)
    rows = conn.execute(
        "SELECT id, locked, json_valid(source) AS source_ok, json_valid(metadata) AS meta_ok "
        f"FROM memories WHERE (json_valid(source) = 0 OR json_valid(metadata) = 0){where}",
        params,
    ).fetchall()
    return [JsonFlag(int(r[0]), bool(r[1]), bool(r[2]), bool(r[3])) for r in rows]


def reset_json(conn: Conn, ids: Sequence[int]) -> int:
    changed = 0
    for chunk in chunks(list(ids)):
        changed += conn.execute(
            "UPDATE memories SET "
            "source = CASE WHEN json_valid(source) THEN source ELSE '{}' END, "
            "metadata = CASE WHEN json_valid(metadata) THEN metadata ELSE '{}' END "
            f"WHERE locked = 0 AND id IN ({ids_clause(chunk)})",
            chunk,
        ).rowcount
    return changed


def untyped_sources(conn: Conn, agent_id: str) -> list[SourceRow]:
    """Valid-JSON sources whose `type` is missing or not canonical (not `{}` or `null`)."""
    where, params = scope(agent_id)
    rows = conn.execute(
        "SELECT id, source, locked FROM memories WHERE json_valid(source) "
        "AND source NOT IN ('{}', 'null') AND trim(source) NOT IN ('{}', 'null') AND "
        "(json_type(source) != 'object' OR json_type(source, '$.type') IS NOT 'text' OR "
        "json_extract(source, '$.type') NOT IN ('User', 'Agent', 'System'))"
        f"{where} ORDER BY id",
        params,
    ).fetchall()
    return [SourceRow(int(r[0]), str(r[1]), bool(r[2])) for r in rows]


def set_sources(conn: Conn, rows: Sequence[tuple[int, str]]) -> int:
    changed = 0
    for row_id, source in rows:
        changed += conn.execute(
            "UPDATE memories SET source = ? WHERE id = ? AND locked = 0", (source, row_id)
        ).rowcount
    return changed


def anonymous_sources(conn: Conn, agent_id: str) -> tuple[int, int]:
    """(rows with the anonymous User sentinel, rows with `{}` / `null` / empty sources)."""
    where, params = scope(agent_id)
    row = conn.execute(
        "SELECT "
        "SUM(CASE WHEN json_valid(source) AND json_type(source) = 'object' "
        "  AND json_extract(source, '$.type') = 'User' AND COALESCE(json_extract(source, '$.id'),"
        "  '') = '' AND COALESCE(json_extract(source, '$.name'), '') = '' THEN 1 ELSE 0 END), "
        "SUM(CASE WHEN trim(source) IN ('{}', 'null', '') THEN 1 ELSE 0 END) "
        f"FROM memories WHERE 1=1{where}",
        params,
    ).fetchone()
    return int(row[0] or 0), int(row[1] or 0)


def sentinel_rows(conn: Conn, agent_id: str) -> list[MemoryFlag]:
    return flags(
        conn.execute(
            "SELECT id, content, locked FROM memories WHERE agent_id = ? AND json_valid(source) "
            "AND json_type(source) = 'object' AND json_extract(source, '$.type') = 'User' "
            "AND COALESCE(json_extract(source, '$.id'), '') = '' "
            "AND COALESCE(json_extract(source, '$.name'), '') = '' ORDER BY id",
            (agent_id,),
        ).fetchall(),
        "id, content, locked",
    )


def set_source(conn: Conn, memory_id: int, source: str) -> int:
    return conn.execute(
        "UPDATE memories SET source = ? WHERE id = ? AND locked = 0", (source, memory_id)
    ).rowcount
