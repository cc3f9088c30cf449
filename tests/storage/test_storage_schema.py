"""The on-disk format (surface.md §7): a fresh database is CPersona 2.5.12's v13 schema plus
cpersona's own three tables; the 2.5.12 sample opens in place with every row unchanged; older
databases climb the migration ladder with their data kept."""

from __future__ import annotations

import re
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest
from cpersona.models import ProjectFilter
from cpersona.storage import memories as memory_sql
from cpersona.storage import open_database, schema
from storage_helpers import (
    DATA_TABLES,
    file_schema,
    integrity,
    mcp_tools,
    read_only,
    schema_objects,
    table_rows,
)

# The schema of SQLite files (tests/pg covers PostgreSQL's): engines here open SQLite only.
pytestmark = pytest.mark.runs_on(store_backend="sqlite")

_ANY = ProjectFilter(None)
V13_TABLES = {"schema_version", "memories", "profiles", "episodes", "pending_memory_tasks"}
FTS_TABLES = {
    f"{base}{suffix}"
    for base in ("memories_fts", "episodes_fts")
    for suffix in ("", "_data", "_idx", "_docsize", "_config")
}
#: 2.5.x's full-text triggers: after insert, delete and update, of memories and of episodes.
V13_TRIGGERS = {
    f"{prefix}_{op}" for prefix in ("memories_fts", "episodes") for op in ("ai", "ad", "au")
}
V13_INDEXES = {
    "idx_memories_agent",
    "idx_memories_msg_id",
    "idx_episodes_agent",
    "idx_memories_agent_channel",
    "idx_episodes_agent_channel",
    "idx_memories_dedup_content",
    "idx_memories_dedup_msg_id",
    "idx_memories_isolation",
    "idx_episodes_isolation",
    "idx_memories_lost_embedding",
    "idx_episodes_lost_embedding",
    "idx_memories_span",
    "sqlite_autoindex_profiles_1",
}
CPERSONA_TABLES = {
    "cpersona_meta",
    "cpersona_migrations",
    "vector_log",
    "fts_log",
    "cpersona_vector_model",
    "cpersona_reembed",
    "cpersona_reembed_vectors",
    "cpersona_pauses",
    "cpersona_subject_aliases",
}
CPERSONA_TRIGGERS = {
    f"cpersona_{log}_{table}_{op}"
    for log in ("vlog", "ftslog")
    for table in ("memories", "episodes")
    for op in ("ai", "ad", "au")
} | {f"cpersona_reembed_{table}_{op}" for table in ("memories", "episodes") for op in ("au", "ad")}
CPERSONA_INDEXES = {
    "sqlite_autoindex_cpersona_meta_1",
    "sqlite_autoindex_cpersona_migrations_1",
    "sqlite_autoindex_cpersona_vector_model_1",
    "sqlite_autoindex_cpersona_reembed_1",
    "sqlite_autoindex_cpersona_pauses_1",
    "sqlite_autoindex_cpersona_subject_aliases_1",
    "sqlite_autoindex_cpersona_subject_aliases_2",
}

#: CPersona 2.6's declared associations (issue 32), created as 2.6.14 creates them, and
#: recall's probe index of cpersona's beside them.
ASSOCIATION_TABLES = {"entities", "entity_aliases", "entity_mentions", "relations"}
ASSOCIATION_TRIGGERS = {f"associations_{t}_ad" for t in ("entities", "memories", "episodes")}
ASSOCIATION_INDEXES = {
    "idx_entity_aliases_normalized",
    "idx_entity_mentions_ref",
    "idx_relations_subject",
    "idx_relations_object",
    "idx_relations_anchor",
    "sqlite_autoindex_entities_1",
    "sqlite_autoindex_entity_aliases_1",
    "sqlite_autoindex_entity_mentions_1",
    "sqlite_autoindex_relations_1",
}
OWN_ASSOCIATION_INDEXES = {"cpersona_relations_agent_predicate"}
UPSTREAM_26 = Path("/work/shared/fixtures/cpersona-2.6.14-associations.db")


def names(objects: dict[tuple[str, str], str], kind: str) -> set[str]:
    return {name for (t, name) in objects if t == kind}


def columns(path: Path, table: str) -> set[tuple]:
    """(name, type, notnull, default, pk) of every column, in no order."""
    with closing(read_only(path)) as conn:
        return {tuple(r[1:]) for r in conn.execute(f"PRAGMA table_info({table})")}


def fresh_file(tmp_path: Path) -> Path:
    path = tmp_path / "fresh.db"
    open_database(str(path)).close()
    return path


# -- a fresh database --------------------------------------------------------------------------


def test_fresh_database_has_exactly_the_v13_objects_plus_cpersonas(tmp_path):
    objects = file_schema(fresh_file(tmp_path))
    assert (
        names(objects, "table")
        == V13_TABLES | FTS_TABLES | CPERSONA_TABLES | {"sqlite_sequence"} | ASSOCIATION_TABLES
    )
    assert names(objects, "trigger") == V13_TRIGGERS | CPERSONA_TRIGGERS | ASSOCIATION_TRIGGERS
    assert names(objects, "index") == (
        V13_INDEXES | CPERSONA_INDEXES | ASSOCIATION_INDEXES | OWN_ASSOCIATION_INDEXES
    )
    assert names(objects, "view") == set()


def test_the_association_tables_are_2_6_14s_own(tmp_path):
    if not UPSTREAM_26.exists():
        pytest.skip(f"fixture database not found: {UPSTREAM_26}")
    ours = file_schema(fresh_file(tmp_path))
    theirs = file_schema(UPSTREAM_26)
    for kind, wanted in (
        ("table", ASSOCIATION_TABLES),
        ("trigger", ASSOCIATION_TRIGGERS),
        ("index", ASSOCIATION_INDEXES),
    ):
        for name in wanted:
            # The stored SQL, as sqlite_master keeps it (IF NOT EXISTS is not kept).
            assert ours[(kind, name)] == theirs[(kind, name)], name


def test_fresh_schema_is_byte_for_byte_that_of_2_5_12(tmp_path, sample_db):
    """Every object the 2.5.12 sample has exists in a fresh file with the same SQL text."""
    theirs = file_schema(sample_db)
    ours = file_schema(fresh_file(tmp_path))
    assert set(theirs) <= set(ours)
    for key, sql in theirs.items():
        assert ours[key] == sql, key
    added = {name for (_, name) in set(ours) - set(theirs)}
    assert added == (
        CPERSONA_TABLES
        | CPERSONA_TRIGGERS
        | CPERSONA_INDEXES
        | ASSOCIATION_TABLES
        | ASSOCIATION_TRIGGERS
        | ASSOCIATION_INDEXES
        | OWN_ASSOCIATION_INDEXES
    )


def test_fresh_columns_match_the_spec(tmp_path):
    with closing(read_only(fresh_file(tmp_path))) as conn:

        def columns(table: str) -> dict[str, tuple[str, int, str | None]]:
            rows = conn.execute(f"PRAGMA table_info({table})")
            return {r[1]: (r[2], r[3], r[4]) for r in rows}

        memories = columns("memories")
        assert list(memories) == [
            "id", "agent_id", "project_id", "msg_id", "content", "source", "timestamp",
            "metadata", "embedding", "channel", "recall_count", "last_recalled_at", "locked",
            "created_at",
        ]  # fmt: skip
        assert memories["source"] == ("TEXT", 1, "'{}'")
        assert memories["embedding"] == ("BLOB", 0, None)
        assert memories["created_at"] == ("TEXT", 1, "datetime('now')")
        assert set(columns("episodes")) == {
            "id", "agent_id", "project_id", "summary", "keywords", "embedding", "start_time",
            "end_time", "resolved", "channel", "created_at",
        }  # fmt: skip
        assert set(columns("profiles")) == {
            "id", "agent_id", "project_id", "user_id", "content", "updated_at",
        }  # fmt: skip
        assert conn.execute("SELECT version FROM schema_version").fetchall() == [(13,)]
        assert conn.execute("PRAGMA user_version").fetchone()[0] & 1 == 0
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        fts = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'memories_fts'").fetchone()
        assert "tokenize='trigram'" in fts[0]


def test_in_memory_database_has_the_same_schema(tmp_path, fresh_db):
    on_disk = file_schema(fresh_file(tmp_path))
    assert schema_objects(fresh_db.write_connection()) == on_disk


def test_fresh_database_file_is_owner_only(tmp_path):
    path = tmp_path / "new" / "dir" / "mem.db"
    open_database(str(path)).close()
    assert path.stat().st_mode & 0o777 == 0o600
    assert path.parent.stat().st_mode & 0o777 == 0o700


def test_reopening_is_idempotent(tmp_path):
    path = fresh_file(tmp_path)
    db = open_database(str(path))
    with db.atomic() as conn:
        conn.execute(
            "INSERT INTO memories(agent_id, content, timestamp) VALUES ('a', 'hello there', 't')"
        )
    db.close()
    extra = ("cpersona_migrations", "cpersona_meta", "vector_log", "fts_log")
    before = (file_schema(path), table_rows(path, DATA_TABLES + extra))
    for _ in range(2):
        open_database(str(path)).close()
        assert (file_schema(path), table_rows(path, DATA_TABLES + extra)) == before
    assert integrity(path) == "ok"


def test_pending_fts_rebuild_flag_is_honoured_and_cleared(tmp_path):
    path = fresh_file(tmp_path)
    with closing(sqlite3.connect(path)) as conn:
        conn.execute(
            "INSERT INTO memories(agent_id, content, timestamp) VALUES ('a', 'xyzzy', 't')"
        )
        # An index that lost its rows, and the durable 'rebuild pending' bit (plus another bit).
        conn.execute("INSERT INTO memories_fts(memories_fts) VALUES ('delete-all')")
        conn.execute("PRAGMA user_version = 5")
        conn.commit()
    db = open_database(str(path))
    try:
        assert [m.content for m in memory_sql.search_fts(db, '"xyzzy"', "a", 5)] == ["xyzzy"]
    finally:
        db.close()
    with closing(read_only(path)) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 4


# -- the CPersona 2.5.12 sample ------------------------------------------------------------------


def test_sample_opens_with_every_row_unchanged(sample_db, make_engine):
    before = table_rows(sample_db)
    schema_before = file_schema(sample_db)
    assert len(before["memories"]) == 59
    engine = make_engine(db_path=sample_db)
    engine.close()
    assert table_rows(sample_db) == before
    # 2.5.12's objects are untouched; only cpersona's own are added.
    after = file_schema(sample_db)
    assert {k: after[k] for k in schema_before} == schema_before
    assert integrity(sample_db) == "ok"


def test_sample_counts_and_embeddings(sample_db, make_engine):
    engine = make_engine(db_path=sample_db)
    db = engine.db
    assert db.query_one("SELECT COUNT(*) FROM memories")[0] == 59
    assert db.query_one("SELECT COUNT(*) FROM memories WHERE agent_id = 'alice'")[0] == 39
    assert db.query_one("SELECT COUNT(*) FROM episodes")[0] == 3
    assert db.query_one("SELECT COUNT(*) FROM profiles")[0] == 1
    assert [r[0] for r in db.query("SELECT id FROM memories WHERE locked = 1")] == [47]
    lengths = {r[0] for r in db.query(f"SELECT {db.ops.byte_length('embedding')} FROM memories")}
    assert lengths == {384 * 4}


@pytest.mark.parametrize(
    ("term", "like"),
    [
        ("deploy", "%deploy%"),
        ("Postgres", "%postgres%"),
        ("火曜日", "%火曜日%"),
        ("ビルド", "%ビルド%"),
    ],
)
def test_sample_fts_finds_rows(sample_db, make_engine, term, like):
    engine = make_engine(db_path=sample_db)
    found = sorted(m.id for m in memory_sql.search_fts(engine.db, f'"{term}"', "alice", 100))
    expected = [
        r[0]
        for r in engine.db.query(
            "SELECT id FROM memories WHERE agent_id = 'alice' AND lower(content) LIKE ? "
            "ORDER BY id",
            (like,),
        )
    ]
    assert found == expected and found


def test_sample_episode_fts_finds_rows(sample_db, make_engine):
    engine = make_engine(db_path=sample_db)
    rows = engine.db.query(
        "SELECT rowid FROM episodes_fts WHERE episodes_fts MATCH '\"deploys\"' ORDER BY rowid"
    )
    assert [r[0] for r in rows] == [1, 2, 3]


@pytest.mark.anyio
async def test_sample_lists_through_mcp(sample_db, make_engine):
    snapshot = table_rows(sample_db)["memories"]
    by_id = {dict(r)["id"]: dict(r) for r in snapshot}
    engine = make_engine(db_path=sample_db)
    async with mcp_tools(engine) as call:
        everyone = await call("list_memories", {"limit": 500})
        assert everyone["count"] == 59
        alice = await call("list_memories", {"agent_id": "alice", "limit": 500})
        assert alice["count"] == 39
        order = sorted(by_id.values(), key=lambda r: (r["created_at"], r["id"]), reverse=True)
        assert [r["id"] for r in everyone["memories"]] == [r["id"] for r in order]
        for row in everyone["memories"]:
            src = by_id[row["id"]]
            for key in ("agent_id", "project_id", "content", "timestamp", "created_at", "channel"):
                assert row[key] == src[key], (row["id"], key)
            assert row["locked"] is (row["id"] == 47)
        in_x = await call("list_memories", {"agent_id": "alice", "project_id": "proj-x"})
        assert {r["project_id"] for r in in_x["memories"]} == {"proj-x", ""}
        episodes = await call("list_episodes", {"agent_id": "alice"})
        assert episodes["count"] == 3
        profile = await call("get_profile", {"agent_id": "alice"})
        assert profile == {"profile": "Alice: backend engineer, prefers pytest, works in JST"}
        # The locked row refuses edits; other rows take them, and dedup sees 2.5.12's rows.
        assert (await call("update_memory", {"memory_id": 47, "content": "x"}))["ok"] is False
        out = await call("update_memory", {"memory_id": 48, "content": "deploy is now one click"})
        assert out == {"ok": True, "updated_id": 48}
        dup = await call("store", {"agent_id": "alice", "message": {"id": "m1", "content": "new"}})
        assert dup == {"ok": True, "result": "skipped", "reason": "duplicate msg_id", "id": 2}
        stored = await call("store", {"agent_id": "alice", "message": {"content": "fresh row"}})
        assert stored["result"] == "stored" and stored["id"] == 61  # AUTOINCREMENT: 60 was used
    found = memory_sql.search_fts(engine.db, '"one click"', "alice", 5)
    assert [m.id for m in found] == [48]
    engine.close()
    assert integrity(sample_db) == "ok"


def test_sample_reopen_is_idempotent(sample_db, make_engine):
    make_engine(db_path=sample_db).close()
    extra = ("cpersona_migrations", "cpersona_meta", "vector_log", "fts_log")
    before = (file_schema(sample_db), table_rows(sample_db, DATA_TABLES + extra))
    make_engine(db_path=sample_db).close()
    assert (file_schema(sample_db), table_rows(sample_db, DATA_TABLES + extra)) == before


# -- migrating older databases -------------------------------------------------------------------

#: The columns the ladder adds to a v2 file's tables (steps 3-13), with the value each old row
#: gets. Stated here, not read from the ladder, so that a step that forgets one fails the test.
ADDED_SINCE_V2 = {
    "memories": {"project_id": "", "channel": "", "recall_count": 0,
                 "last_recalled_at": None, "locked": 0},
    "episodes": {"project_id": "", "channel": "", "resolved": 0},
    "profiles": {"project_id": ""},
    "pending_memory_tasks": {"project_id": ""},
}  # fmt: skip


def v2_schema() -> str:
    """A v2 file's schema: the v13 base tables and indexes as storage/schema.py declares them,
    less the columns added since, and the schema_version rows 1 and 2."""
    statements = []
    for ddl in schema.BASE_TABLES:
        table = re.match(r"CREATE TABLE IF NOT EXISTS (\w+)", ddl)
        added = ADDED_SINCE_V2.get(table.group(1), {}) if table else {}
        lines = ddl.splitlines()
        kept = [line for line in lines if (line.split() or [""])[0] not in added]
        assert len(lines) - len(kept) == len(added), ddl  # each added column is a line there
        statements.append("\n".join(kept))
    return ";\n".join([*statements, "INSERT INTO schema_version(version) VALUES (1), (2)"]) + ";"


# A v4 file: FTS5 with the default (unicode61) tokenizer and the old, unscoped update triggers.
V4_FTS = """
CREATE VIRTUAL TABLE memories_fts USING fts5(content, content=memories, content_rowid=id);
CREATE VIRTUAL TABLE episodes_fts USING fts5(summary, keywords, content=episodes, content_rowid=id);
CREATE TRIGGER memories_fts_ai AFTER INSERT ON memories BEGIN
    INSERT INTO memories_fts(rowid, content) VALUES (new.id, new.content);
END;
CREATE TRIGGER memories_fts_ad AFTER DELETE ON memories BEGIN
    INSERT INTO memories_fts(memories_fts, rowid, content) VALUES ('delete', old.id, old.content);
END;
CREATE TRIGGER memories_fts_au AFTER UPDATE ON memories BEGIN
    INSERT INTO memories_fts(memories_fts, rowid, content) VALUES ('delete', old.id, old.content);
    INSERT INTO memories_fts(rowid, content) VALUES (new.id, new.content);
END;
CREATE TRIGGER episodes_ai AFTER INSERT ON episodes BEGIN
    INSERT INTO episodes_fts(rowid, summary, keywords) VALUES (new.id, new.summary, new.keywords);
END;
ALTER TABLE episodes ADD COLUMN resolved INTEGER NOT NULL DEFAULT 0;
INSERT INTO schema_version(version) VALUES (3), (4);
"""

OLD_MEMORIES = [
    # (agent_id, msg_id, content, source, timestamp, metadata, embedding)
    (
        "alice",
        "m1",
        "the deploy script needs --force",
        '{"type": "User"}',
        "2025-01-01",
        "{}",
        None,
    ),
    (
        "alice",
        "m2",
        "会議は毎週火曜日の10時から",
        "{}",
        "2025-01-02T00:00:00+09:00",
        "{}",
        b"\0" * 8,
    ),
    ("bob", "m1", "the deploy script needs --force", "{}", "2025-01-03", '{"k": 1}', None),
    ("alice", "", "duplicate text", "{}", "2025-01-04", "{}", None),
    ("alice", "", "duplicate text", "{}", "2025-01-05", "{}", None),
    ("alice", "m9", "first with m9", "{}", "2025-01-06", "{}", None),
    ("alice", "m9", "second with m9", "{}", "2025-01-07", "{}", None),
]


def make_old_db(path: Path, *, fts: bool) -> None:
    with closing(sqlite3.connect(path)) as conn:
        conn.executescript(v2_schema())
        if fts:
            conn.executescript(V4_FTS)
        conn.executemany(
            "INSERT INTO memories(agent_id, msg_id, content, source, timestamp, metadata, "
            "embedding) VALUES (?, ?, ?, ?, ?, ?, ?)",
            OLD_MEMORIES,
        )
        conn.execute(
            "INSERT INTO episodes(agent_id, summary, keywords, start_time) "
            "VALUES ('alice', 'discussed the deploy', 'deploy', '2025-01-01')"
        )
        conn.execute("INSERT INTO profiles(agent_id, content) VALUES ('alice', 'likes tea')")
        conn.execute(
            "INSERT INTO pending_memory_tasks(task_type, agent_id, payload) "
            "VALUES ('update_profile', 'alice', '{}')"
        )
        conn.commit()


@pytest.mark.parametrize("fts", [False, True], ids=["v2-no-fts", "v4-unicode61-fts"])
def test_old_database_migrates_to_v13_with_data_kept(tmp_path, make_engine, fts):
    path = tmp_path / "old.db"
    make_old_db(path, fts=fts)
    before = table_rows(path, ("memories", "episodes", "profiles", "pending_memory_tasks"))
    engine = make_engine(db_path=path)
    engine.close()

    # Schema: the objects of a fresh file. Columns added by ALTER TABLE come last (surface.md
    # §7.1), so tables are compared column by column; every other object by its SQL text.
    fresh_path = fresh_file(tmp_path)
    fresh, migrated = file_schema(fresh_path), file_schema(path)
    assert set(migrated) == set(fresh)
    for key, sql in fresh.items():
        if key[0] != "table" or key[1] in FTS_TABLES:
            assert migrated[key] == sql, key
    for table in V13_TABLES:
        assert columns(path, table) == columns(fresh_path, table), table
    with closing(read_only(path)) as conn:
        assert conn.execute("SELECT MAX(version) FROM schema_version").fetchone()[0] == 13
        assert conn.execute("PRAGMA user_version").fetchone()[0] & 1 == 0
    assert integrity(path) == "ok"

    after = table_rows(path, ("memories", "episodes", "profiles", "pending_memory_tasks"))
    for table, defaults in ADDED_SINCE_V2.items():
        old_rows = [dict(r) for r in before[table]]
        # v12: exact duplicates keep their oldest row (id 5 goes); older msg_id collisions
        # lose their msg_id (row 6 keeps its text, the newer row 7 keeps m9).
        if table == "memories":
            old_rows = [r for r in old_rows if r["id"] != 5]
            for r in old_rows:
                if r["id"] == 6:
                    r["msg_id"] = ""
        assert [dict(r) for r in after[table]] == [{**r, **defaults} for r in old_rows], table


@pytest.mark.anyio
@pytest.mark.parametrize("fts", [False, True], ids=["v2-no-fts", "v4-unicode61-fts"])
async def test_migrated_database_serves(tmp_path, make_engine, fts):
    path = tmp_path / "old.db"
    make_old_db(path, fts=fts)
    engine = make_engine(db_path=path)
    # Trigram FTS over the old rows, Japanese included.
    jp = memory_sql.search_fts(engine.db, '"火曜日"', "alice", 10)
    assert [m.content for m in jp] == ["会議は毎週火曜日の10時から"]
    assert [m.id for m in memory_sql.search_fts(engine.db, '"deploy"', "alice", 10)] == [1]
    async with mcp_tools(engine) as call:
        listed = await call("list_memories", {"agent_id": "alice"})
        assert listed["count"] == 5
        again = await call("store", {"agent_id": "alice", "message": {"content": "duplicate text"}})
        assert again == {"ok": True, "result": "skipped", "reason": "duplicate content", "id": 4}
        m9 = await call("store", {"agent_id": "alice", "message": {"id": "m9", "content": "x"}})
        assert m9["id"] == 7
        assert (await call("lock_memory", {"memory_id": 1}))["ok"] is True
        out = await call("update_memory", {"memory_id": 2, "content": "会議は水曜日に移動"})
        assert out["ok"] is True
    assert [m.id for m in memory_sql.search_fts(engine.db, '"水曜日"', "alice", 10)] == [2]
    assert memory_sql.search_fts(engine.db, '"火曜日"', "alice", 10) == []
    engine.close()
    assert integrity(path) == "ok"
    before = (file_schema(path), table_rows(path))
    make_engine(db_path=path).close()
    assert (file_schema(path), table_rows(path)) == before


def test_sample_stays_writable_by_a_2_5_client_after_cpersona_opened_it(sample_db, make_engine):
    """Writes made without cpersona (as 2.5.x makes them) keep working and are seen by it."""
    make_engine(db_path=sample_db).close()
    with closing(sqlite3.connect(sample_db)) as conn:
        conn.execute("PRAGMA busy_timeout=5000")
        conn.execute(
            "INSERT INTO memories (agent_id, project_id, msg_id, content, source, timestamp, "
            "metadata, embedding, channel) VALUES ('alice', '', 'legacy-1', "
            "'written by the old server', '{}', '2026-11-30T00:00:00+00:00', '{}', NULL, '')"
        )
        conn.execute("UPDATE memories SET content = 'old server edit' WHERE id = 2")
        conn.execute("DELETE FROM memories WHERE id = 3")
        conn.execute("UPDATE memories SET recall_count = recall_count + 1 WHERE id = 4")
        conn.commit()
        fts = conn.execute(
            "SELECT rowid FROM memories_fts WHERE memories_fts MATCH '\"old server\"' "
            "ORDER BY rowid"
        ).fetchall()
        assert [r[0] for r in fts] == [2, 61]
    assert integrity(sample_db) == "ok"
    engine = make_engine(db_path=sample_db)
    listed = {m.id: m.content for m in memory_sql.list_newest(engine.db, "alice", _ANY, 500)}
    assert listed[61] == "written by the old server" and listed[2] == "old server edit"
    assert 3 not in listed and len(listed) == 39


def test_a_newer_schema_version_is_opened_as_is(tmp_path, make_engine):
    path = fresh_file(tmp_path)
    with closing(sqlite3.connect(path)) as conn:
        conn.execute("INSERT INTO schema_version(version) VALUES (14)")
        conn.commit()
    before = (file_schema(path), table_rows(path))
    make_engine(db_path=path).close()
    assert (file_schema(path), table_rows(path)) == before
