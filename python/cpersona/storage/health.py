"""SQL of the health registry (surface.md §9.2): what each check reads and each repair writes.

Functions take the `Handle` the caller is working on: `reading(db)` for report-only runs,
the one `fixing(db)` opened for a fix run (so a check sees its own repairs). A handle is
opaque above storage/; it translates driver errors (storage/errors.py). Functions return
ints, strings and the small frozen row types below, never driver rows. An agent scope of ""
means every agent.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from cpersona.storage import schema, vector_models
from cpersona.storage.db import dialect_of, embedding_param, quote_identifier
from cpersona.storage.errors import ConstraintError, StorageError, translated
from cpersona.storage.interface import Connection, Cursor, Store

Params = list[Any]


class Handle:
    """What a health run reads and writes through: this thread's reader, or the write
    transaction of a fix run. Only storage functions use its connection."""

    __slots__ = ("_conn", "_db")

    def __init__(self, db: Store, conn: Connection) -> None:
        self._db = db
        self._conn = conn

    @property
    def dialect(self) -> str:
        """The backend (db.dialect_of reads it, as of a connection)."""
        return self._db.dialect

    def vector_param(self, blob: bytes | None) -> object:
        """An embedding parameter for this backend (db.embedding_param calls it)."""
        convert = getattr(self._db, "vector_param", None)
        return blob if convert is None else convert(blob)

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Cursor:
        """Run one statement (storage/ only); driver errors leave translated."""
        with translated():
            return self._conn.execute(sql, params)

    @contextmanager
    def step(self) -> Iterator[None]:
        """A nested savepoint of the fix transaction: a failing block is rolled back alone."""
        with translated(), self._db.atomic():
            yield


Conn = Handle


def reading(db: Store) -> Handle:
    """A handle on this thread's reader (autocommit: each statement sees the newest commit)."""
    return Handle(db, db.reader())


@contextmanager
def fixing(db: Store) -> Iterator[Handle]:
    """One write transaction for a whole fix run: committed when the block ends, rolled back
    when it raises."""
    with translated(), db.atomic() as conn:
        yield Handle(db, conn)


@contextmanager
def writing(db: Store) -> Iterator[Handle]:
    """A short write transaction (a deep-check repair, a batch of re-embedded vectors)."""
    with fixing(db) as handle:
        yield handle


# -- what applies to this backend ------------------------------------------------------------

#: Checks whose subject exists only in an SQLite database, with the reason a PostgreSQL
#: database reports them as not applicable (docs/compatibility.md, "Health checks").
SQLITE_ONLY: dict[str, str] = {
    "fts_integrity": (
        "PostgreSQL has no FTS5 tables: the full-text index is the Rust core's, kept "
        "current from fts_log and rebuilt when it disagrees"
    ),
    "dedup_msg_id_index": (
        "reads SQLite's schema table; on PostgreSQL the UNIQUE indexes are part of the "
        "schema cpersona creates"
    ),
    "schema_objects": (
        "compares SQLite DDL text (FTS5 triggers, SQLite indexes); PostgreSQL's schema "
        "objects are created and migrated by cpersona's PostgreSQL schema"
    ),
    "sqlite_integrity": (
        "PRAGMA quick_check is SQLite's; use PostgreSQL's own checks (amcheck, "
        "pg_checksums) on the server"
    ),
    "vector_index": (
        "no local vector index files on PostgreSQL: recall scans the vectors in the "
        "database (pgvector)"
    ),
}


def not_applicable(db: Store) -> dict[str, str]:
    """{check name: reason} of the registry checks that cannot apply to `db`'s backend."""
    return {} if db.dialect == "sqlite" else dict(SQLITE_ONLY)


# -- typed rows ------------------------------------------------------------------------------


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
class JsonFlag:
    id: int
    locked: bool
    source_ok: bool
    meta_ok: bool


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
class SourceRow:
    id: int
    source: str
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


@dataclass(frozen=True, slots=True)
class Sized:
    id: int
    n: int


def _flags(rows: list[Any], columns: str) -> list[MemoryFlag]:
    """`rows` of the SELECT list `columns` (names as in MemoryFlag) as flags."""
    names = [c.strip() for c in columns.split(",")]
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


# -- the model record, read through a health handle ------------------------------------------


def recorded_models(conn: Conn) -> dict[str, vector_models.Recorded]:
    return vector_models.recorded(conn._conn)


def open_conversions(conn: Conn) -> dict[str, vector_models.Conversion]:
    return vector_models.conversions(conn._conn)


def conversion_progress(conn: Conn, table: str) -> tuple[int, int]:
    return vector_models.progress(conn._conn, table)


def has_vectors(conn: Conn, table: str) -> bool:
    return vector_models.has_vectors(conn._conn, table)


#: The 18 schema objects the `schema_objects` check verifies: name -> (kind, DDL, critical).
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


def _scope(agent_id: str, column: str = "agent_id") -> tuple[str, Params]:
    return (f" AND {column} = ?", [agent_id]) if agent_id else ("", [])


def _ids_clause(ids: Sequence[int]) -> str:
    return ",".join("?" * len(ids))


def _chunks(ids: Sequence[int], size: int = 500) -> Iterator[Sequence[int]]:
    for i in range(0, len(ids), size):
        yield ids[i : i + size]


# -- counts and stats ------------------------------------------------------------------------


def count(conn: Conn, table: str, agent_id: str = "") -> int:
    where, params = _scope(agent_id)
    row = conn.execute(
        f"SELECT COUNT(*) FROM {quote_identifier(table)} WHERE 1=1{where}", params
    ).fetchone()
    return int(row[0])


def db_size(conn: Conn) -> int:
    """Bytes the database takes: page_count x page_size on SQLite, pg_database_size on
    PostgreSQL."""
    if dialect_of(conn) == "postgresql":  # the database's files
        return int(conn.execute("SELECT pg_database_size(current_database())").fetchone()[0])
    pages = conn.execute("PRAGMA page_count").fetchone()[0]
    size = conn.execute("PRAGMA page_size").fetchone()[0]
    return int(pages) * int(size)


def axis_counts(conn: Conn, column: str, agent_id: str, limit: int = 20) -> list[tuple[str, int]]:
    where, params = _scope(agent_id)
    rows = conn.execute(
        f"SELECT {column}, COUNT(*) AS n FROM memories WHERE 1=1{where} "
        f"GROUP BY {column} ORDER BY n DESC, {column} LIMIT ?",
        [*params, limit],
    ).fetchall()
    return [(str(r[0]), int(r[1])) for r in rows]


def project_ids(conn: Conn, agent_id: str) -> list[str]:
    where, params = _scope(agent_id)
    rows = conn.execute(
        f"SELECT project_id FROM memories WHERE 1=1{where} UNION "
        f"SELECT project_id FROM episodes WHERE 1=1{where}",
        params + params,
    ).fetchall()
    return [str(r[0]) for r in rows]


def agents(conn: Conn) -> list[str]:
    rows = conn.execute(
        "SELECT agent_id FROM memories UNION SELECT agent_id FROM profiles "
        "UNION SELECT agent_id FROM episodes ORDER BY 1"
    ).fetchall()
    return [str(r[0]) for r in rows]


# -- content ---------------------------------------------------------------------------------


def memories_containing(conn: Conn, needle: str, agent_id: str) -> list[MemoryFlag]:
    where, params = _scope(agent_id)
    return _flags(
        conn.execute(
            "SELECT id, agent_id, project_id, channel, content, locked FROM memories "
            f"WHERE instr(content, ?) > 0{where} ORDER BY id",
            [needle, *params],
        ).fetchall(),
        "id, agent_id, project_id, channel, content, locked",
    )


def oversized_memories(conn: Conn, cap: int, agent_id: str) -> list[MemoryFlag]:
    where, params = _scope(agent_id)
    return _flags(
        conn.execute(
            "SELECT id, agent_id, project_id, channel, content, locked, length(content) AS n "
            f"FROM memories WHERE length(content) > ?{where} ORDER BY id",
            [cap, *params],
        ).fetchall(),
        "id, agent_id, project_id, channel, content, locked, n",
    )


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
    where, params = _scope(agent_id, "m.agent_id")
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
        rows, _flags(rows, "id, agent_id, project_id, channel, locked, g"), strict=True
    ):
        groups.setdefault(int(r["g"]), []).append(flag)
    return list(groups.values())


def delete_unlocked_memories(conn: Conn, ids: Sequence[int]) -> int:
    deleted = 0
    for chunk in _chunks(list(ids)):
        deleted += conn.execute(
            f"DELETE FROM memories WHERE locked = 0 AND id IN ({_ids_clause(chunk)})", chunk
        ).rowcount
    return deleted


def empty_content(conn: Conn, agent_id: str) -> list[MemoryFlag]:
    where, params = _scope(agent_id)
    return _flags(
        conn.execute(
            f"SELECT id, locked FROM memories WHERE trim(content) = ''{where} ORDER BY id", params
        ).fetchall(),
        "id, locked",
    )


def short_content(conn: Conn, agent_id: str, max_len: int) -> list[MemoryFlag]:
    return _flags(
        conn.execute(
            "SELECT id, content, locked FROM memories WHERE agent_id = ? "
            "AND length(trim(content)) <= ? ORDER BY id",
            (agent_id, max_len),
        ).fetchall(),
        "id, content, locked",
    )


# -- embeddings ------------------------------------------------------------------------------


def wrong_width(conn: Conn, table: str, width_bytes: int, agent_id: str) -> list[int]:
    where, params = _scope(agent_id)
    rows = conn.execute(
        f"SELECT id FROM {quote_identifier(table)} WHERE embedding IS NOT NULL "
        f"AND length(embedding) != ?{where} ORDER BY id",
        [width_bytes, *params],
    ).fetchall()
    return [int(r[0]) for r in rows]


def width_counts(conn: Conn, table: str, agent_id: str) -> dict[int, int]:
    """Stored vector widths (in float32 components) -> rows."""
    where, params = _scope(agent_id)
    rows = conn.execute(
        f"SELECT length(embedding) / 4 AS w, COUNT(*) FROM {quote_identifier(table)} "
        f"WHERE embedding IS NOT NULL{where} GROUP BY w",
        params,
    ).fetchall()
    return {int(r[0]): int(r[1]) for r in rows}


def iter_embeddings(
    conn: Conn,
    table: str,
    agent_id: str,
    batch: int = 2000,
    newest_first: bool = False,
    limit: int | None = None,
) -> Iterator[list[tuple[int, bytes]]]:
    """Batches of (id, BLOB) of the embedded rows, by id (or newest first)."""
    where, params = _scope(agent_id)
    order = "DESC" if newest_first else "ASC"
    last: int | None = None
    taken = 0
    while limit is None or taken < limit:
        size = batch if limit is None else min(batch, limit - taken)
        cursor = "" if last is None else (" AND id < ?" if newest_first else " AND id > ?")
        rows = conn.execute(
            f"SELECT id, embedding FROM {quote_identifier(table)} WHERE embedding IS NOT NULL"
            f"{where}{cursor} ORDER BY id {order} LIMIT ?",
            [*params, *([] if last is None else [last]), size],
        ).fetchall()
        if not rows:
            return
        last = int(rows[-1][0])
        taken += len(rows)
        yield [(int(r[0]), bytes(r[1])) for r in rows]


def null_embeddings(conn: Conn, table: str, ids: Sequence[int]) -> int:
    changed = 0
    for chunk in _chunks(list(ids)):
        changed += conn.execute(
            f"UPDATE {quote_identifier(table)} SET embedding = NULL "
            f"WHERE id IN ({_ids_clause(chunk)})",
            chunk,
        ).rowcount
    return changed


def null_all_embeddings(conn: Conn, table: str, agent_id: str) -> int:
    where, params = _scope(agent_id)
    return conn.execute(
        f"UPDATE {quote_identifier(table)} SET embedding = NULL WHERE embedding IS NOT NULL{where}",
        params,
    ).rowcount


def missing_embeddings(conn: Conn, table: str, agent_id: str) -> int:
    where, params = _scope(agent_id)
    row = conn.execute(
        f"SELECT COUNT(*) FROM {quote_identifier(table)} WHERE embedding IS NULL{where}", params
    ).fetchone()
    return int(row[0])


def texts_to_embed(conn: Conn, table: str, agent_id: str, limit: int) -> list[tuple[int, str]]:
    """(id, text) of rows without an embedding, oldest first, at most `limit`."""
    column = "content" if table == "memories" else "summary"
    where, params = _scope(agent_id)
    rows = conn.execute(
        f"SELECT id, {column} FROM {quote_identifier(table)} WHERE embedding IS NULL{where} "
        "ORDER BY id LIMIT ?",
        [*params, limit],
    ).fetchall()
    return [(int(r[0]), str(r[1])) for r in rows]


def texts_by_id(conn: Conn, table: str, ids: Sequence[int]) -> dict[int, str]:
    column = "content" if table == "memories" else "summary"
    out: dict[int, str] = {}
    for chunk in _chunks(list(ids)):
        for r in conn.execute(
            f"SELECT id, {column} FROM {quote_identifier(table)} "
            f"WHERE id IN ({_ids_clause(chunk)})",
            chunk,
        ):
            out[int(r[0])] = str(r[1])
    return out


def set_embeddings(conn: Conn, table: str, rows: Sequence[tuple[int, bytes]]) -> int:
    """Write vectors to rows that still have none (a row re-embedded meanwhile is left)."""
    changed = 0
    for row_id, blob in rows:
        changed += conn.execute(
            f"UPDATE {quote_identifier(table)} SET embedding = ? "
            "WHERE id = ? AND embedding IS NULL",
            (embedding_param(conn, blob), row_id),
        ).rowcount
    return changed


# -- FTS and schema objects ------------------------------------------------------------------


def table_exists(conn: Conn, name: str) -> bool:
    if dialect_of(conn) == "postgresql":
        return conn.execute("SELECT to_regclass(?) IS NOT NULL", (name,)).fetchone()[0] is True
    row = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)
    ).fetchone()
    return row is not None


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


def schema_version(conn: Conn) -> int:
    return int(conn.execute("SELECT COALESCE(MAX(version), 0) FROM schema_version").fetchone()[0])


def object_sql(conn: Conn, name: str) -> str | None:
    row = conn.execute(
        "SELECT sql FROM sqlite_master WHERE name = ? AND type IN ('index', 'trigger')", (name,)
    ).fetchone()
    return None if row is None else str(row[0])


def drop_object(conn: Conn, kind: str, name: str) -> None:
    conn.execute(
        f"DROP {'TRIGGER' if kind == 'trigger' else 'INDEX'} IF EXISTS {quote_identifier(name)}"
    )


@contextmanager
def savepoint(conn: Conn, name: str) -> Iterator[None]:
    """A nested savepoint: rolled back alone (restoring what it dropped) when the block fails."""
    conn.execute(f"SAVEPOINT {name}")
    try:
        yield
    except BaseException:
        conn.execute(f"ROLLBACK TO {name}")
        conn.execute(f"RELEASE {name}")
        raise
    conn.execute(f"RELEASE {name}")


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
    return conn.execute(
        """UPDATE memories SET msg_id = '' WHERE locked = 0 AND msg_id != '' AND id NOT IN (
               SELECT MAX(id) FROM memories WHERE msg_id != ''
               GROUP BY agent_id, project_id, msg_id)"""
    ).rowcount


def msg_id_colliders(conn: Conn) -> list[bool]:
    """The `locked` flag of every row that blocks the msg_id UNIQUE index (all but the newest
    row of each (agent, project, msg_id) group)."""
    rows = conn.execute(
        "SELECT locked FROM memories WHERE msg_id != '' AND id NOT IN (SELECT MAX(id) "
        "FROM memories WHERE msg_id != '' GROUP BY agent_id, project_id, msg_id)"
    ).fetchall()
    return [bool(r[0]) for r in rows]


def quick_check(conn: Conn) -> list[str]:
    return [str(r[0]) for r in conn.execute("PRAGMA quick_check(10)").fetchall()]


# -- JSON, timestamps, sources ---------------------------------------------------------------


def invalid_json(conn: Conn, agent_id: str) -> list[JsonFlag]:
    where, params = _scope(agent_id)
    rows = conn.execute(
        "SELECT id, locked, json_valid(source) AS source_ok, json_valid(metadata) AS meta_ok "
        f"FROM memories WHERE (json_valid(source) = 0 OR json_valid(metadata) = 0){where}",
        params,
    ).fetchall()
    return [JsonFlag(int(r[0]), bool(r[1]), bool(r[2]), bool(r[3])) for r in rows]


def reset_json(conn: Conn, ids: Sequence[int]) -> int:
    changed = 0
    for chunk in _chunks(list(ids)):
        changed += conn.execute(
            "UPDATE memories SET "
            "source = CASE WHEN json_valid(source) THEN source ELSE '{}' END, "
            "metadata = CASE WHEN json_valid(metadata) THEN metadata ELSE '{}' END "
            f"WHERE locked = 0 AND id IN ({_ids_clause(chunk)})",
            chunk,
        ).rowcount
    return changed


_CANON = "strftime('%Y-%m-%dT%H:%M:%S+00:00', created_at)"


def _instants_moved(conn: Conn, table: str, ids: Sequence[int]) -> None:
    """Log rows whose `timestamp`/`start_time` a repair rewrote: the index files key each row
    by its instant (cpersona.timerange), and the log triggers do not watch those columns."""
    for row_id in ids:
        conn.execute("INSERT INTO fts_log(tbl, row_id) VALUES (?, ?)", (table, row_id))
        if dialect_of(conn) == "sqlite":  # PostgreSQL has no vector index file
            conn.execute(
                "INSERT INTO vector_log(tbl, row_id, op) VALUES (?, ?, 'u')", (table, row_id)
            )


def unparseable_timestamps(conn: Conn, agent_id: str) -> list[StampFlag]:
    where, params = _scope(agent_id)
    rows = conn.execute(
        f"SELECT id, locked, julianday(created_at) IS NOT NULL AS fixable FROM memories "
        f"WHERE timestamp != '' AND julianday(timestamp) IS NULL{where} ORDER BY id",
        params,
    ).fetchall()
    return [StampFlag(int(r[0]), bool(r[1]), bool(r[2])) for r in rows]


def future_timestamps(conn: Conn, skew_seconds: int, agent_id: str) -> list[StampFlag]:
    where, params = _scope(agent_id)
    rows = conn.execute(
        "SELECT id, locked, julianday(created_at) <= julianday('now') + ? / 86400.0 AS fixable "
        "FROM memories WHERE julianday(timestamp) > julianday('now') + ? / 86400.0"
        f"{where} ORDER BY id",
        [skew_seconds, skew_seconds, *params],
    ).fetchall()
    return [StampFlag(int(r[0]), bool(r[1]), bool(r[2])) for r in rows]


def timestamps_from_created_at(conn: Conn, ids: Sequence[int]) -> int:
    changed = 0
    for chunk in _chunks(list(ids)):
        changed += conn.execute(
            f"UPDATE memories SET timestamp = {_CANON} WHERE locked = 0 "
            f"AND julianday(created_at) IS NOT NULL AND id IN ({_ids_clause(chunk)})",
            chunk,
        ).rowcount
        _instants_moved(conn, "memories", chunk)
    return changed


def episodes_without_start(conn: Conn, agent_id: str) -> list[int]:
    where, params = _scope(agent_id)
    rows = conn.execute(
        f"SELECT id FROM episodes WHERE (start_time IS NULL OR start_time = ''){where} ORDER BY id",
        params,
    ).fetchall()
    return [int(r[0]) for r in rows]


def start_times_from_created_at(conn: Conn, ids: Sequence[int]) -> int:
    changed = 0
    for chunk in _chunks(list(ids)):
        changed += conn.execute(
            f"UPDATE episodes SET start_time = {_CANON} WHERE julianday(created_at) IS NOT NULL "
            f"AND id IN ({_ids_clause(chunk)})",
            chunk,
        ).rowcount
        _instants_moved(conn, "episodes", chunk)
    return changed


def memory_timestamps(conn: Conn, agent_id: str) -> list[MemoryStamp]:
    where, params = _scope(agent_id)
    rows = conn.execute(
        f"SELECT id, timestamp, locked FROM memories WHERE timestamp != ''{where}", params
    ).fetchall()
    return [MemoryStamp(int(r[0]), str(r[1]), bool(r[2])) for r in rows]


def set_timestamps(conn: Conn, rows: Sequence[tuple[int, str]]) -> int:
    changed = 0
    for row_id, stamp in rows:
        changed += conn.execute(
            "UPDATE memories SET timestamp = ? WHERE id = ? AND locked = 0", (stamp, row_id)
        ).rowcount
    _instants_moved(conn, "memories", [row_id for row_id, _ in rows])
    return changed


def episode_times(conn: Conn, agent_id: str) -> list[EpisodeTimes]:
    where, params = _scope(agent_id)
    rows = conn.execute(
        f"SELECT id, start_time, end_time, created_at, {_CANON} AS canon FROM episodes "
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


def untyped_sources(conn: Conn, agent_id: str) -> list[SourceRow]:
    """Valid-JSON sources whose `type` is missing or not canonical (not `{}` or `null`)."""
    where, params = _scope(agent_id)
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
    where, params = _scope(agent_id)
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
    return _flags(
        conn.execute(
            "SELECT id, content, locked FROM memories WHERE agent_id = ? AND json_valid(source) "
            "AND json_type(source) = 'object' AND json_extract(source, '$.type') = 'User' "
            "AND COALESCE(json_extract(source, '$.id'), '') = '' "
            "AND COALESCE(json_extract(source, '$.name'), '') = '' ORDER BY id",
            (agent_id,),
        ).fetchall(),
        "id, content, locked",
    )


# -- profiles, tasks, episodes ---------------------------------------------------------------


def oversized_profiles(conn: Conn, cap: int, agent_id: str) -> list[Sized]:
    where, params = _scope(agent_id)
    rows = conn.execute(
        f"SELECT id, length(content) AS n FROM profiles WHERE length(content) > ?{where}",
        [cap, *params],
    ).fetchall()
    return [Sized(int(r[0]), int(r[1])) for r in rows]


def truncate_profiles(conn: Conn, ids: Sequence[int], cap: int) -> int:
    changed = 0
    for chunk in _chunks(list(ids)):
        changed += conn.execute(
            "UPDATE profiles SET content = substr(content, 1, ?), updated_at = datetime('now') "
            f"WHERE id IN ({_ids_clause(chunk)})",
            [cap, *chunk],
        ).rowcount
    return changed


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


def stale_tasks(conn: Conn, agent_id: str, hours: int = 1) -> list[int]:
    where, params = _scope(agent_id)
    rows = conn.execute(
        "SELECT id FROM pending_memory_tasks WHERE julianday(created_at) < "
        f"julianday('now') - ? / 24.0{where} ORDER BY id",
        [hours, *params],
    ).fetchall()
    return [int(r[0]) for r in rows]


def delete_tasks(conn: Conn, ids: Sequence[int]) -> int:
    deleted = 0
    for chunk in _chunks(list(ids)):
        deleted += conn.execute(
            f"DELETE FROM pending_memory_tasks WHERE id IN ({_ids_clause(chunk)})", chunk
        ).rowcount
    return deleted


def agents_without_profile(conn: Conn, agent_id: str) -> list[str]:
    where, params = _scope(agent_id, "m.agent_id")
    rows = conn.execute(
        "SELECT DISTINCT m.agent_id FROM memories m LEFT JOIN profiles p "
        f"ON p.agent_id = m.agent_id WHERE p.id IS NULL{where} ORDER BY 1",
        params,
    ).fetchall()
    return [str(r[0]) for r in rows]


def profile_updated_at(conn: Conn, agent_id: str) -> tuple[str, float] | None:
    """(updated_at, age in days) of the agent's profile, or None."""
    row = conn.execute(
        "SELECT updated_at, julianday('now') - julianday(updated_at) FROM profiles "
        "WHERE agent_id = ? AND user_id = ''",
        (agent_id,),
    ).fetchone()
    return None if row is None else (str(row[0]), float(row[1] or 0.0))


def orphaned_episodes(conn: Conn, agent_id: str) -> list[EpisodeTimes]:
    """Episodes with a start and end but no memory of the agent stamped inside that span."""
    rows = conn.execute(
        "SELECT e.id, e.start_time, e.end_time FROM episodes e WHERE e.agent_id = ? "
        "AND julianday(e.start_time) IS NOT NULL AND julianday(e.end_time) IS NOT NULL "
        "AND NOT EXISTS (SELECT 1 FROM memories m WHERE m.agent_id = e.agent_id "
        "AND julianday(m.timestamp) BETWEEN julianday(e.start_time) AND julianday(e.end_time))"
        " ORDER BY e.id",
        (agent_id,),
    ).fetchall()
    return [EpisodeTimes(int(r[0]), r[1], r[2]) for r in rows]


def newest_texts(
    conn: Conn, table: str, column: str, agent_id: str, limit: int
) -> list[tuple[int, str]]:
    where, params = _scope(agent_id)
    rows = conn.execute(
        f"SELECT id, {column} FROM {quote_identifier(table)} WHERE 1=1{where} "
        "ORDER BY id DESC LIMIT ?",
        [*params, limit],
    ).fetchall()
    return [(int(r[0]), str(r[1] or "")) for r in rows]


def set_source(conn: Conn, memory_id: int, source: str) -> int:
    return conn.execute(
        "UPDATE memories SET source = ? WHERE id = ? AND locked = 0", (source, memory_id)
    ).rowcount
