"""SQL of the time checks: memory timestamps and episode spans that do not parse, lie in
the future or drift in form, stale pending tasks, stale profiles and orphaned episodes."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from cpersona.storage.upkeep.handle import Conn, scope, set_unlocked, write_by_ids


@dataclass(frozen=True, slots=True)
class StampFlag:
    """A memory whose timestamp is wrong; `fixable`: its created_at can replace it."""

    id: int
    locked: bool
    fixable: bool


@dataclass(frozen=True, slots=True)
class MemoryStamp:
    id: int
    timestamp: str
    locked: bool


@dataclass(frozen=True, slots=True)
class EpisodeTimes:
    """An episode's span; `created_at` and `canon` (created_at in the canonical UTC form, or
    None when unparsable) where the query reads them."""

    id: int
    start_time: str | None
    end_time: str | None
    created_at: str = ""
    canon: str | None = None


def _instants_moved(conn: Conn, table: str, ids: Sequence[int]) -> None:
    """Log rows whose `timestamp`/`start_time` a repair rewrote: the index files key each row
    by its instant (cpersona.timerange), and the log triggers do not watch those columns."""
    for row_id in ids:
        conn.execute("INSERT INTO fts_log(tbl, row_id) VALUES (?, ?)", (table, row_id))
        # Both backends keep vector_log (PostgreSQL since pg_0005: its hosts' vector files
        # follow it), whether or not this process scans a vector file.
        conn.execute("INSERT INTO vector_log(tbl, row_id, op) VALUES (?, ?, 'u')", (table, row_id))


def unparseable_timestamps(conn: Conn, agent_id: str) -> list[StampFlag]:
    where, params = scope(agent_id)
    age = conn.ops.age_seconds
    rows = conn.execute(
        f"SELECT id, locked, {age('created_at')} IS NOT NULL AS fixable FROM memories "
        f"WHERE timestamp != '' AND {age('timestamp')} IS NULL{where} ORDER BY id",
        params,
    ).fetchall()
    return [StampFlag(int(r[0]), bool(r[1]), bool(r[2])) for r in rows]


def future_timestamps(conn: Conn, skew_seconds: int, agent_id: str) -> list[StampFlag]:
    where, params = scope(agent_id)
    # Ahead of now by more than the skew: an age below minus the skew.
    age = conn.ops.age_seconds
    rows = conn.execute(
        f"SELECT id, locked, {age('created_at')} >= ? AS fixable "
        f"FROM memories WHERE {age('timestamp')} < ?{where} ORDER BY id",
        [-float(skew_seconds), -float(skew_seconds), *params],
    ).fetchall()
    return [StampFlag(int(r[0]), bool(r[1]), bool(r[2])) for r in rows]


def timestamps_from_created_at(conn: Conn, ids: Sequence[int]) -> int:
    return _from_created_at(conn, "memories", "timestamp", "locked = 0 AND ", ids)


def episodes_without_start(conn: Conn, agent_id: str) -> list[int]:
    where, params = scope(agent_id)
    rows = conn.execute(
        f"SELECT id FROM episodes WHERE (start_time IS NULL OR start_time = ''){where} ORDER BY id",
        params,
    ).fetchall()
    return [int(r[0]) for r in rows]


def start_times_from_created_at(conn: Conn, ids: Sequence[int]) -> int:
    return _from_created_at(conn, "episodes", "start_time", "", ids)


def _from_created_at(conn: Conn, table: str, column: str, guard: str, ids: Sequence[int]) -> int:
    """Set `column` to the row's created_at in the canonical UTC form, where that parses;
    `guard` a further condition (`locked = 0 AND `)."""
    canon = conn.ops.utc_iso("created_at")
    changed = write_by_ids(
        conn, f"UPDATE {table} SET {column} = {canon} WHERE {guard}{canon} IS NOT NULL AND", ids
    )
    _instants_moved(conn, table, ids)
    return changed


def memory_timestamps(conn: Conn, agent_id: str) -> list[MemoryStamp]:
    where, params = scope(agent_id)
    rows = conn.execute(
        f"SELECT id, timestamp, locked FROM memories WHERE timestamp != ''{where}", params
    ).fetchall()
    return [MemoryStamp(int(r[0]), str(r[1]), bool(r[2])) for r in rows]


def set_timestamps(conn: Conn, rows: Sequence[tuple[int, str]]) -> int:
    changed = set_unlocked(conn, "timestamp", rows)
    _instants_moved(conn, "memories", [row_id for row_id, _ in rows])
    return changed


def episode_times(conn: Conn, agent_id: str) -> list[EpisodeTimes]:
    where, params = scope(agent_id)
    rows = conn.execute(
        f"SELECT id, start_time, end_time, created_at, {conn.ops.utc_iso('created_at')} AS canon "
        "FROM episodes "
        f"WHERE (COALESCE(start_time, '') != '' OR COALESCE(end_time, '') != ''){where}",
        params,
    ).fetchall()
    return [EpisodeTimes(int(r[0]), r[1], r[2], str(r[3]), r[4]) for r in rows]


def set_episode_times(conn: Conn, rows: Sequence[tuple[int, str | None, str | None]]) -> int:
    changed = 0
    for row_id, start, end in rows:
        changed += conn.execute(
            "UPDATE episodes SET start_time = ?, end_time = ? WHERE id = ?", (start, end, row_id)
        ).rowcount
    _instants_moved(conn, "episodes", [row_id for row_id, _, _ in rows])
    return changed


def stale_tasks(conn: Conn, agent_id: str, hours: int = 1) -> list[int]:
    where, params = scope(agent_id)
    rows = conn.execute(
        f"SELECT id FROM pending_memory_tasks WHERE {conn.ops.age_seconds('created_at')} > ?"
        f"{where} ORDER BY id",
        [hours * 3600.0, *params],
    ).fetchall()
    return [int(r[0]) for r in rows]


def delete_tasks(conn: Conn, ids: Sequence[int]) -> int:
    return write_by_ids(conn, "DELETE FROM pending_memory_tasks WHERE", ids)


def profile_updated_at(conn: Conn, agent_id: str) -> tuple[str, float] | None:
    """(updated_at, age in days) of the agent's profile, or None."""
    row = conn.execute(
        f"SELECT updated_at, {conn.ops.age_seconds('updated_at')} / 86400.0 FROM profiles "
        "WHERE agent_id = ? AND user_id = ''",
        (agent_id,),
    ).fetchone()
    return None if row is None else (str(row[0]), float(row[1] or 0.0))


def orphaned_episodes(conn: Conn, agent_id: str) -> list[EpisodeTimes]:
    """Episodes with a start and end but no memory of the agent stamped inside that span."""
    # Ages run backwards: a stamp inside [start, end] has an age in [age(end), age(start)].
    age = conn.ops.age_seconds
    rows = conn.execute(
        "SELECT e.id, e.start_time, e.end_time FROM episodes e WHERE e.agent_id = ? "
        f"AND {age('e.start_time')} IS NOT NULL AND {age('e.end_time')} IS NOT NULL "
        "AND NOT EXISTS (SELECT 1 FROM memories m WHERE m.agent_id = e.agent_id "
        f"AND {age('m.timestamp')} BETWEEN {age('e.end_time')} AND {age('e.start_time')})"
        " ORDER BY e.id",
        (agent_id,),
    ).fetchall()
    return [EpisodeTimes(int(r[0]), r[1], r[2]) for r in rows]
