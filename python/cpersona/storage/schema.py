"""The schema and its migrations: CPersona 2.5.x's v13 layout plus cpersona's own tables.

A database written by CPersona 2.5.x opens in place and stays readable by it (surface.md §7):
the five tables, FTS5 with the trigram tokenizer and the v13 triggers are created exactly as
2.5.x creates them. The 2.5.x ladder (steps 3-13, keyed on `MAX(schema_version.version)`)
brings older files up to v13. cpersona's own additions are named steps recorded in
`cpersona_migrations`, each run once inside one transaction.
"""

from __future__ import annotations

import logging
import os
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass

from cpersona.storage import association_schema, shared, vector_models
from cpersona.storage.db import Database
from cpersona.storage.ops import ops_of

log = logging.getLogger("cpersona.storage")

SCHEMA_VERSION = 13

BASE_TABLES = (
    """CREATE TABLE IF NOT EXISTS schema_version (
    version    INTEGER PRIMARY KEY,
    applied_at TEXT NOT NULL DEFAULT (datetime('now'))
)""",
    """CREATE TABLE IF NOT EXISTS memories (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    agent_id   TEXT NOT NULL,
    project_id TEXT NOT NULL DEFAULT '',
    msg_id     TEXT NOT NULL DEFAULT '',
    content    TEXT NOT NULL,
    source     TEXT NOT NULL DEFAULT '{}',
    timestamp  TEXT NOT NULL,
    metadata   TEXT NOT NULL DEFAULT '{}',
    embedding  BLOB,
    channel    TEXT NOT NULL DEFAULT '',
    recall_count INTEGER NOT NULL DEFAULT 0,
    last_recalled_at TEXT,
    locked     INTEGER NOT NULL DEFAULT 0,
    created_at TEXT NOT NULL DEFAULT (datetime('now'))
)""",
    """CREATE INDEX IF NOT EXISTS idx_memories_agent
    ON memories(agent_id, created_at DESC)""",
    """CREATE INDEX IF NOT EXISTS idx_memories_msg_id
    ON memories(agent_id, msg_id)""",
    """CREATE TABLE IF NOT EXISTS profiles (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    agent_id   TEXT NOT NULL,
    project_id TEXT NOT NULL DEFAULT '',
    user_id    TEXT NOT NULL DEFAULT '',
    content    TEXT NOT NULL,
    updated_at TEXT NOT NULL DEFAULT (datetime('now')),
    UNIQUE(agent_id, user_id)
)""",
    """CREATE TABLE IF NOT EXISTS episodes (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    agent_id   TEXT NOT NULL,
    project_id TEXT NOT NULL DEFAULT '',
    summary    TEXT NOT NULL,
    keywords   TEXT NOT NULL DEFAULT '',
    embedding  BLOB,
    start_time TEXT,
    end_time   TEXT,
    resolved   INTEGER NOT NULL DEFAULT 0,
    channel    TEXT NOT NULL DEFAULT '',
    created_at TEXT NOT NULL DEFAULT (datetime('now'))
)""",
    """CREATE INDEX IF NOT EXISTS idx_episodes_agent
    ON episodes(agent_id, created_at DESC)""",
    """CREATE TABLE IF NOT EXISTS pending_memory_tasks (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    task_type  TEXT NOT NULL,
    agent_id   TEXT NOT NULL,
    project_id TEXT NOT NULL DEFAULT '',
    payload    TEXT NOT NULL,
    retries    INTEGER NOT NULL DEFAULT 0,
    created_at TEXT NOT NULL DEFAULT (datetime('now'))
)""",
)

FTS_TABLES = (
    """CREATE VIRTUAL TABLE IF NOT EXISTS memories_fts USING fts5(
    content,
    content=memories,
    content_rowid=id,
    tokenize='trigram'
)""",
    """CREATE VIRTUAL TABLE IF NOT EXISTS episodes_fts USING fts5(
    summary,
    keywords,
    content=episodes,
    content_rowid=id,
    tokenize='trigram'
)""",
)

FTS_INSERT_DELETE_TRIGGERS = (
    """CREATE TRIGGER IF NOT EXISTS memories_fts_ai AFTER INSERT ON memories BEGIN
    INSERT INTO memories_fts(rowid, content) VALUES (new.id, new.content);
END""",
    """CREATE TRIGGER IF NOT EXISTS memories_fts_ad AFTER DELETE ON memories BEGIN
    INSERT INTO memories_fts(memories_fts, rowid, content)
    VALUES ('delete', old.id, old.content);
END""",
    """CREATE TRIGGER IF NOT EXISTS episodes_ai AFTER INSERT ON episodes BEGIN
    INSERT INTO episodes_fts(rowid, summary, keywords)
    VALUES (new.id, new.summary, new.keywords);
END""",
    """CREATE TRIGGER IF NOT EXISTS episodes_ad AFTER DELETE ON episodes BEGIN
    INSERT INTO episodes_fts(episodes_fts, rowid, summary, keywords)
    VALUES ('delete', old.id, old.summary, old.keywords);
END""",
)

# Column-scoped so that recall-count bumps never rewrite the FTS index (surface.md §7.3).
FTS_UPDATE_TRIGGERS = (
    """CREATE TRIGGER memories_fts_au AFTER UPDATE OF content ON memories
WHEN old.content <> new.content BEGIN
    INSERT INTO memories_fts(memories_fts, rowid, content)
    VALUES ('delete', old.id, old.content);
    INSERT INTO memories_fts(rowid, content) VALUES (new.id, new.content);
END""",
    """CREATE TRIGGER episodes_au AFTER UPDATE OF summary, keywords ON episodes
WHEN old.summary <> new.summary OR old.keywords <> new.keywords BEGIN
    INSERT INTO episodes_fts(episodes_fts, rowid, summary, keywords)
    VALUES ('delete', old.id, old.summary, old.keywords);
    INSERT INTO episodes_fts(rowid, summary, keywords)
    VALUES (new.id, new.summary, new.keywords);
END""",
)

DEDUP_INDEXES = (
    "CREATE UNIQUE INDEX IF NOT EXISTS idx_memories_dedup_content "
    "ON memories(agent_id, project_id, channel, content)",
    "CREATE UNIQUE INDEX IF NOT EXISTS idx_memories_dedup_msg_id "
    "ON memories(agent_id, project_id, msg_id) WHERE msg_id != ''",
)

BOOT_INDEXES = (
    """CREATE INDEX IF NOT EXISTS idx_memories_isolation
    ON memories(agent_id, project_id, created_at DESC)""",
    """CREATE INDEX IF NOT EXISTS idx_episodes_isolation
    ON episodes(agent_id, project_id, created_at DESC)""",
    """CREATE INDEX IF NOT EXISTS idx_memories_lost_embedding
    ON memories(id) WHERE embedding IS NULL""",
    """CREATE INDEX IF NOT EXISTS idx_episodes_lost_embedding
    ON episodes(id) WHERE embedding IS NULL""",
    """CREATE INDEX IF NOT EXISTS idx_memories_span
    ON memories(agent_id, timestamp, project_id, channel)""",
)

#: Added by the v6 and v10 steps (and created directly on a fresh database).
CHANNEL_INDEXES = (
    "CREATE INDEX IF NOT EXISTS idx_memories_agent_channel "
    "ON memories(agent_id, channel, created_at DESC)",
    "CREATE INDEX IF NOT EXISTS idx_episodes_agent_channel "
    "ON episodes(agent_id, channel, created_at DESC)",
)
#: Every plain (non-unique) index of the v13 schema, for the health registry's repairs.
PLAIN_INDEXES = (
    *(ddl for ddl in BASE_TABLES if ddl.startswith("CREATE INDEX")),
    *CHANNEL_INDEXES,
    *BOOT_INDEXES,
)

#: Columns whose change moves a row in (or out of) the vector index.
VECTOR_COLUMNS = "embedding, agent_id, project_id, channel, created_at"


def _vector_log_triggers(table: str, extra: str) -> tuple[str, ...]:
    cols = VECTOR_COLUMNS + extra
    return (
        f"""CREATE TRIGGER IF NOT EXISTS cpersona_vlog_{table}_ai AFTER INSERT ON {table} BEGIN
    INSERT INTO vector_log(tbl, row_id, op) VALUES ('{table}', new.id, 'i');
END""",
        f"""CREATE TRIGGER IF NOT EXISTS cpersona_vlog_{table}_ad AFTER DELETE ON {table} BEGIN
    INSERT INTO vector_log(tbl, row_id, op) VALUES ('{table}', old.id, 'd');
END""",
        # Watches `id` too and logs both ids: a row renumbered leaves its old slot behind.
        f"""CREATE TRIGGER IF NOT EXISTS cpersona_vlog_{table}_au
AFTER UPDATE OF id, {cols} ON {table} BEGIN
    INSERT INTO vector_log(tbl, row_id, op) VALUES ('{table}', old.id, 'u');
    INSERT INTO vector_log(tbl, row_id, op) SELECT '{table}', new.id, 'u' WHERE new.id <> old.id;
END""",
    )


#: Columns whose change moves a row's text or scope in the full-text index (docs/fts-index.md).
FTS_LOG_COLUMNS = {
    "memories": "content, agent_id, project_id, channel, source, created_at",
    "episodes": "summary, keywords, agent_id, project_id, channel, created_at",
}


def _fts_log_triggers(table: str) -> tuple[str, ...]:
    return (
        f"""CREATE TRIGGER IF NOT EXISTS cpersona_ftslog_{table}_ai AFTER INSERT ON {table} BEGIN
    INSERT INTO fts_log(tbl, row_id) VALUES ('{table}', new.id);
END""",
        f"""CREATE TRIGGER IF NOT EXISTS cpersona_ftslog_{table}_ad AFTER DELETE ON {table} BEGIN
    INSERT INTO fts_log(tbl, row_id) VALUES ('{table}', old.id);
END""",
        f"""CREATE TRIGGER IF NOT EXISTS cpersona_ftslog_{table}_au
AFTER UPDATE OF id, {FTS_LOG_COLUMNS[table]} ON {table} BEGIN
    INSERT INTO fts_log(tbl, row_id) VALUES ('{table}', old.id);
    INSERT INTO fts_log(tbl, row_id) SELECT '{table}', new.id WHERE new.id <> old.id;
END""",
    )


@dataclass(frozen=True, slots=True)
class Step:
    """One named migration. `before` = a 2.5.x ladder step run while MAX(version) < before."""

    name: str
    run: Callable[[sqlite3.Connection, bool], None]
    before: int | None = None


def _columns(conn: sqlite3.Connection, table: str) -> set[str]:
    return {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}


def _add_column(conn: sqlite3.Connection, table: str, column: str, ddl: str) -> None:
    if column not in _columns(conn, table):
        conn.execute(f"ALTER TABLE {table} ADD COLUMN {column} {ddl}")


def _step3(conn: sqlite3.Connection, fts: bool) -> None:
    _add_column(conn, "episodes", "resolved", "INTEGER NOT NULL DEFAULT 0")


def _step4(conn: sqlite3.Connection, fts: bool) -> None:
    if fts:
        conn.execute("INSERT INTO memories_fts(memories_fts) VALUES ('rebuild')")


def _step5(conn: sqlite3.Connection, fts: bool) -> None:
    if fts:
        _recreate_fts(conn)


def _step6(conn: sqlite3.Connection, fts: bool) -> None:
    _add_column(conn, "memories", "channel", "TEXT NOT NULL DEFAULT ''")
    conn.execute(CHANNEL_INDEXES[0])


def _step7(conn: sqlite3.Connection, fts: bool) -> None:
    _add_column(conn, "memories", "recall_count", "INTEGER NOT NULL DEFAULT 0")
    _add_column(conn, "memories", "last_recalled_at", "TEXT")


def _step8(conn: sqlite3.Connection, fts: bool) -> None:
    _add_column(conn, "memories", "locked", "INTEGER NOT NULL DEFAULT 0")


def _step9(conn: sqlite3.Connection, fts: bool) -> None:
    for table in ("memories", "profiles", "episodes", "pending_memory_tasks"):
        _add_column(conn, table, "project_id", "TEXT NOT NULL DEFAULT ''")


def _step10(conn: sqlite3.Connection, fts: bool) -> None:
    _add_column(conn, "episodes", "channel", "TEXT NOT NULL DEFAULT ''")
    conn.execute(CHANNEL_INDEXES[1])


def _step11(conn: sqlite3.Connection, fts: bool) -> None:
    if fts:
        _replace_update_triggers(conn)
        conn.execute("INSERT INTO memories_fts(memories_fts) VALUES ('rebuild')")


def _step12(conn: sqlite3.Connection, fts: bool) -> None:
    # Exact duplicates: keep the oldest unlocked row of each bucket (locked rows are kept).
    conn.execute(
        """DELETE FROM memories WHERE locked = 0 AND id NOT IN (
               SELECT MIN(id) FROM memories GROUP BY agent_id, project_id, channel, content)"""
    )
    conn.execute(
        """UPDATE memories SET msg_id = '' WHERE locked = 0 AND msg_id != '' AND id NOT IN (
               SELECT MAX(id) FROM memories WHERE msg_id != ''
               GROUP BY agent_id, project_id, msg_id)"""
    )
    _create_dedup_indexes(conn)


def _step13(conn: sqlite3.Connection, fts: bool) -> None:
    if fts:
        _replace_update_triggers(conn)


def _meta(conn: sqlite3.Connection, fts: bool) -> None:
    conn.execute(
        "CREATE TABLE IF NOT EXISTS cpersona_meta (key TEXT PRIMARY KEY, value BLOB NOT NULL)"
    )
    conn.execute(
        "INSERT INTO cpersona_meta(key, value) VALUES ('db_uid', ?) ON CONFLICT DO NOTHING",
        (os.urandom(16),),
    )


def _vector_log(conn: sqlite3.Connection, fts: bool) -> None:
    conn.execute(
        """CREATE TABLE IF NOT EXISTS vector_log (
    seq    INTEGER PRIMARY KEY AUTOINCREMENT,
    tbl    TEXT NOT NULL,
    row_id INTEGER NOT NULL,
    op     TEXT NOT NULL
)"""
    )
    for ddl in _vector_log_triggers("memories", ", source") + _vector_log_triggers("episodes", ""):
        conn.execute(ddl)


LADDER: tuple[Step, ...] = (
    Step("v3_episode_resolved", _step3, 3),
    Step("v4_backfill_memories_fts", _step4, 4),
    Step("v5_trigram_fts", _step5, 5),
    Step("v6_memory_channel", _step6, 6),
    Step("v7_recall_stats", _step7, 7),
    Step("v8_memory_lock", _step8, 8),
    Step("v9_project_axis", _step9, 9),
    Step("v10_episode_channel", _step10, 10),
    Step("v11_fts_update_triggers", _step11, 11),
    Step("v12_dedup_indexes", _step12, 12),
    Step("v13_column_scoped_triggers", _step13, 13),
)


def _vector_log_watches_ids(conn: sqlite3.Connection, fts: bool) -> None:
    for table in ("memories", "episodes"):
        conn.execute(f"DROP TRIGGER IF EXISTS cpersona_vlog_{table}_au")
    _vector_log(conn, fts)


def _fts_log(conn: sqlite3.Connection, fts: bool) -> None:
    conn.execute(
        """CREATE TABLE IF NOT EXISTS fts_log (
    seq    INTEGER PRIMARY KEY AUTOINCREMENT,
    tbl    TEXT NOT NULL,
    row_id INTEGER NOT NULL
)"""
    )
    for ddl in _fts_log_triggers("memories") + _fts_log_triggers("episodes"):
        conn.execute(ddl)


def _vector_models(conn: sqlite3.Connection, fts: bool) -> None:
    for ddl in vector_models.DDL + vector_models.triggers():
        conn.execute(ddl)


def _shared_state(conn: sqlite3.Connection, fts: bool) -> None:
    for ddl in shared.SQLITE_DDL:
        conn.execute(ddl)


def _associations(conn: sqlite3.Connection, fts: bool) -> None:
    # CPersona 2.6's tables as 2.6.14 creates them: a 2.6 store already has them (IF NOT
    # EXISTS leaves its rows), and a store made here is one 2.6.14 reads as its own.
    for ddl in association_schema.SQLITE_DDL:
        conn.execute(ddl)
    # cpersona's own, beside 2.6's: recall's one probe for declared replacing roles.
    conn.execute(association_schema.AGENT_PREDICATE_INDEX)


OWN_STEPS: tuple[Step, ...] = (
    Step("cpersona_0001_meta", _meta),
    Step("cpersona_0002_vector_log", _vector_log),
    Step("cpersona_0003_vector_log_watches_ids", _vector_log_watches_ids),
    Step("cpersona_0004_fts_log", _fts_log),
    Step("cpersona_0005_vector_models", _vector_models),
    Step("cpersona_0006_shared_state", _shared_state),
    Step("cpersona_0007_associations", _associations),
)


def migrate(db: Database, *, fts_enabled: bool) -> None:
    """Bring the database to the current schema. Safe to run on every start."""
    conn = db.write_connection()
    with db.atomic():
        for ddl in BASE_TABLES:
            conn.execute(ddl)
    fts_rebuild = _ensure_fts(db, fts_enabled)
    with db.atomic():
        current = conn.execute("SELECT COALESCE(MAX(version), 0) FROM schema_version").fetchone()[0]
        if current > SCHEMA_VERSION:
            log.warning("schema version %s is newer than %s; continuing", current, SCHEMA_VERSION)
        fresh = current == 0 and _is_empty(conn)
        if not fresh:
            for step in LADDER:
                if step.before is not None and current < step.before:
                    log.info("migrating: %s", step.name)
                    step.run(conn, fts_enabled)
    if fts_rebuild:
        _rebuild_fts(db)
    with db.atomic():
        _create_dedup_indexes(conn)
        for ddl in BOOT_INDEXES:
            conn.execute(ddl)
        if fresh:
            for ddl in CHANNEL_INDEXES:
                conn.execute(ddl)
        if current < SCHEMA_VERSION:
            conn.execute(
                "INSERT INTO schema_version(version) VALUES (?) ON CONFLICT (version) "
                "DO UPDATE SET applied_at = excluded.applied_at",
                (SCHEMA_VERSION,),
            )
        conn.execute(
            """CREATE TABLE IF NOT EXISTS cpersona_migrations (
    name       TEXT PRIMARY KEY,
    applied_at TEXT NOT NULL DEFAULT (datetime('now'))
)"""
        )
        done = {row[0] for row in conn.execute("SELECT name FROM cpersona_migrations")}
        for step in OWN_STEPS:
            if step.name not in done:
                step.run(conn, fts_enabled)
                conn.execute("INSERT INTO cpersona_migrations(name) VALUES (?)", (step.name,))


def _is_empty(conn: sqlite3.Connection) -> bool:
    for table in ("memories", "episodes", "profiles"):
        if conn.execute(f"SELECT 1 FROM {table} LIMIT 1").fetchone():
            return False
    return True


def _ensure_fts(db: Database, fts_enabled: bool) -> bool:
    """Create FTS tables and triggers; return whether a rebuild of both indexes is pending.

    `PRAGMA user_version` bit 0 is the durable "rebuild pending" flag of CPersona 2.5.x: set
    and committed before tables are (re)created, cleared after a successful rebuild.
    """
    if not fts_enabled:
        return False
    conn = db.write_connection()
    existed = _table_exists(conn, "memories_fts")
    au = conn.execute(
        "SELECT sql FROM sqlite_master WHERE type='trigger' AND name='memories_fts_au'"
    ).fetchone()
    stale = au is not None and "AFTER UPDATE OF content" not in au[0]
    pending = bool(conn.execute("PRAGMA user_version").fetchone()[0] & 1)
    if not existed or stale or au is None:
        _set_rebuild_flag(conn, True)
        pending = True
    with db.atomic():
        for ddl in FTS_TABLES + FTS_INSERT_DELETE_TRIGGERS:
            conn.execute(ddl)
        if pending:
            _replace_update_triggers(conn)
    return pending


def _rebuild_fts(db: Database) -> None:
    conn = db.write_connection()
    with db.atomic():
        conn.execute("INSERT INTO memories_fts(memories_fts) VALUES ('rebuild')")
        conn.execute("INSERT INTO episodes_fts(episodes_fts) VALUES ('rebuild')")
    _set_rebuild_flag(conn, False)


def _set_rebuild_flag(conn: sqlite3.Connection, on: bool) -> None:
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    new = (version | 1) if on else (version & ~1)
    if new != version:
        conn.execute(f"PRAGMA user_version={int(new)}")


def _replace_update_triggers(conn: sqlite3.Connection) -> None:
    conn.execute("DROP TRIGGER IF EXISTS memories_fts_au")
    conn.execute("DROP TRIGGER IF EXISTS episodes_au")
    for ddl in FTS_UPDATE_TRIGGERS:
        conn.execute(ddl)


def _recreate_fts(conn: sqlite3.Connection) -> None:
    for name in (
        "memories_fts_ai",
        "memories_fts_ad",
        "memories_fts_au",
        "episodes_ai",
        "episodes_ad",
        "episodes_au",
    ):
        conn.execute(f"DROP TRIGGER IF EXISTS {name}")
    conn.execute("DROP TABLE IF EXISTS memories_fts")
    conn.execute("DROP TABLE IF EXISTS episodes_fts")
    for ddl in FTS_TABLES + FTS_INSERT_DELETE_TRIGGERS + FTS_UPDATE_TRIGGERS:
        conn.execute(ddl)
    conn.execute("INSERT INTO memories_fts(memories_fts) VALUES ('rebuild')")
    conn.execute("INSERT INTO episodes_fts(episodes_fts) VALUES ('rebuild')")


def _create_dedup_indexes(conn: sqlite3.Connection) -> None:
    # Best effort: locked duplicate rows may legitimately block them (health reports it).
    for ddl in DEDUP_INDEXES:
        conn.execute("SAVEPOINT dedup_index")
        try:
            conn.execute(ddl)
        except sqlite3.IntegrityError as exc:
            log.warning("could not create a dedup index (%s); duplicates remain", exc)
            conn.execute("ROLLBACK TO dedup_index")
        conn.execute("RELEASE dedup_index")


def _table_exists(conn: sqlite3.Connection, name: str) -> bool:
    row = conn.execute(ops_of(conn).table_exists(), (name,)).fetchone()
    return row is not None
