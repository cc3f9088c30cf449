"""SQL of the checks whose subject is SQLite's own: FTS5 tables, the DDL in sqlite_master,
the msg_id UNIQUE index and PRAGMA quick_check (health.check.Applies says so)."""

from __future__ import annotations

from cpersona.storage import schema
from cpersona.storage.db import quote_identifier
from cpersona.storage.error_kinds import StorageError
from cpersona.storage.upkeep.handle import Conn, savepoint

SCHEMA_OBJECTS: dict[str, tuple[str, str, bool]] = {}


def _register_objects() -> None:
    ddl = {
        "idx_memories_dedup_content": (schema.DEDUP_INDEXES[0], True),
        "idx_memories_dedup_msg_id": (schema.DEDUP_INDEXES[1], True),
    }
    for text in schema.FTS_INSERT_DELETE_TRIGGERS + schema.FTS_UPDATE_TRIGGERS:
        name = text.split()[2] if "IF NOT EXISTS" not in text else text.split()[5]
        ddl[name] = (text, True)
    perf = schema.PLAIN_INDEXES
    for text in perf:
        ddl[text.split()[5]] = (text, False)
    for name, (text, critical) in ddl.items():
        kind = "trigger" if "TRIGGER" in text.split("\n")[0] else "index"
        SCHEMA_OBJECTS[name] = (kind, text, critical)


_register_objects()


def fts_problem(conn: Conn, name: str) -> str | None:
    """None when the FTS5 index agrees with its content table, else SQLite's complaint."""
    try:
        conn.execute(
            f"INSERT INTO {quote_identifier(name)}({quote_identifier(name)}, rank) "
            "VALUES ('integrity-check', 1)"
        )
    except StorageError as exc:
        return str(exc)
    return None


def fts_rebuild(conn: Conn) -> None:
    """Create missing FTS tables and triggers, then rebuild both indexes from their tables."""
    for ddl in schema.FTS_TABLES + schema.FTS_INSERT_DELETE_TRIGGERS:
        conn.execute(ddl)
    for name in ("memories_fts_au", "episodes_au"):
        if object_sql(conn, name) is None:
            conn.execute(next(t for t in schema.FTS_UPDATE_TRIGGERS if name in t.split()[2]))
    conn.execute("INSERT INTO memories_fts(memories_fts) VALUES ('rebuild')")
    conn.execute("INSERT INTO episodes_fts(episodes_fts) VALUES ('rebuild')")


def object_sql(conn: Conn, name: str) -> str | None:
    row = conn.execute(
        "SELECT sql FROM sqlite_master WHERE name = ? AND type IN ('index', 'trigger')", (name,)
    ).fetchone()
    return None if row is None else str(row[0])


def drop_object(conn: Conn, kind: str, name: str) -> None:
    conn.execute(
        f"DROP {'TRIGGER' if kind == 'trigger' else 'INDEX'} IF EXISTS {quote_identifier(name)}"
    )


def create_msg_id_index(conn: Conn) -> None:
    """Create the msg_id UNIQUE index in a savepoint (ConstraintError: rows still collide)."""
    with savepoint(conn, "msgidx"):
        conn.execute(SCHEMA_OBJECTS["idx_memories_dedup_msg_id"][1])


def recreate_object(conn: Conn, name: str, *, drifted: bool) -> None:
    """Create one of SCHEMA_OBJECTS (dropping a drifted one first) in a savepoint: on
    failure (ConstraintError: duplicates block a UNIQUE index) the old object is restored."""
    kind, ddl, _ = SCHEMA_OBJECTS[name]
    with savepoint(conn, "schemaobj"):
        if drifted:
            drop_object(conn, kind, name)
        conn.execute(ddl)


def blank_colliding_msg_ids(conn: Conn) -> int:
    """Blank the msg_id of older unlocked rows colliding on (agent, project, msg_id), every
    agent (the `dedup_msg_id_index` repair, exactly as migration step 12 does it)."""
    cur = conn.execute(
        """UPDATE memories SET msg_id = '' WHERE locked = 0 AND msg_id != '' AND id NOT IN (
               SELECT MAX(id) FROM memories WHERE msg_id != ''
               GROUP BY agent_id, project_id, msg_id)"""
    )
    return int(cur.rowcount)


def msg_id_colliders(conn: Conn) -> list[bool]:
    """The `locked` flag of every row that blocks the msg_id UNIQUE index (all but the newest
    row of each (agent, project, msg_id) group)."""
    rows = conn.execute(
        "SELECT locked FROM memories WHERE msg_id != '' AND id NOT IN (SELECT MAX(id) "
        "FROM memories WHERE msg_id != '' GROUP BY agent_id, project_id, msg_id)"
    ).fetchall()
    return [bool(r[0]) for r in rows]


#: Why a database without a file of its own has no page check here (the `sqlite_integrity`
#: check's reason on PostgreSQL).
QUICK_CHECK_ELSEWHERE = (
    "PRAGMA quick_check is SQLite's; use PostgreSQL's own checks (amcheck, "
    "pg_checksums) on the server"
)


def quick_check(conn: Conn) -> list[str]:
    return [str(r[0]) for r in conn.execute("PRAGMA quick_check(10)").fetchall()]
