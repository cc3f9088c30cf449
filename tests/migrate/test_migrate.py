"""`cpersona migrate`: whole databases copied through the command, resumed after a SIGKILL,
verified, and refused with one line when the target or source is wrong."""

from __future__ import annotations

import io
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest
from cpersona.commands.migrate import migrate, open_source, open_target
from cpersona.storage import open_database
from migrate_support import (
    KILLED,
    digest,
    dump,
    migrate_cli,
    one_line,
    recall_answers,
    run,
    sequences,
)

pytestmark = pytest.mark.anyio


async def test_the_fixture_migrates_whole_and_unchanged(sample_db, tmp_path):
    before = digest(sample_db)
    target = tmp_path / "out" / "copy.db"
    done = migrate_cli("--from", str(sample_db), "--to", str(target))
    assert done.returncode == 0, done.stderr
    summary = done.stderr.strip().splitlines()[-1]
    assert "copied 63 rows (59 memories, 3 episodes, 1 profiles)" in summary
    assert "verified row counts and 63 sampled rows" in summary
    # The 2.5.x file is read, never written (SQLite's read-only open of a WAL file may leave
    # an empty -wal and its -shm index beside it).
    assert digest(sample_db) == before
    wal = Path(f"{sample_db}-wal")
    assert not wal.exists() or wal.stat().st_size == 0
    assert dump(target) == dump(sample_db)
    # Ids deleted in the source (the fixture's 60th memory) are not handed out again.
    assert sequences(target)["memories"] == sequences(sample_db)["memories"] == 60
    # The target is an ordinary cpersona database now: no progress record is left.
    with closing(sqlite3.connect(target)) as conn:
        names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
    assert "cpersona_migrate_progress" not in names and "cpersona_meta" in names
    assert await recall_answers(target) == await recall_answers(sample_db)


async def test_a_generated_database_round_trips_with_every_table(generated, tmp_path):
    middle, back = tmp_path / "middle.db", tmp_path / "back.db"
    first = migrate_cli("--from", str(generated), "--to", str(middle), "--batch", "256")
    assert first.returncode == 0, first.stderr
    assert "cpersona migrate: memories 2,998/2,998 rows (100%)" in first.stderr
    second = migrate_cli("--to", str(back), env={"CPERSONA_DB_PATH": str(middle)})
    assert second.returncode == 0, second.stderr
    want = dump(generated)
    assert dump(middle) == want and dump(back) == want
    assert {len(rows) for rows in want.values()} >= {1, 2, 6, 4, 20, 300, 2998}
    # Blobs that are not float32 vectors travel between SQLite files byte for byte.
    blobs = {row[0]: row[8] for row in dump(back)["memories"][:4]}
    assert blobs[2] == b"\x01\x02\x03\x04\x05" and blobs[3] == b""
    assert sequences(back) == sequences(generated)
    assert await recall_answers(back) == await recall_answers(generated)


def test_a_killed_migration_resumes_where_it_stopped(generated, tmp_path):
    target = tmp_path / "target.db"
    killed = run(str(KILLED), str(generated), str(target), "100", "7")
    assert killed.returncode == -9, killed.stderr
    partial = dump(target)["memories"]
    assert len(partial) == 700  # seven committed batches, nothing of the eighth
    assert partial == dump(generated)["memories"][:700]
    again = migrate_cli("--from", str(generated), "--to", str(target), "--batch", "100")
    assert again.returncode == 0, again.stderr
    assert "resuming the migration from" in again.stderr
    assert "memories 800/2,998" in again.stderr  # the first batch after the kill
    assert "3,331 rows (2,998 memories, 300 episodes, 6 profiles, 4 pending_memory_tasks, " in (
        again.stderr
    )
    assert "; 2,631 of them by this run)" in again.stderr
    assert dump(target) == dump(generated)
    assert sequences(target) == sequences(generated)


def test_a_target_holding_rows_is_refused_unless_forced(generated, sample_db, tmp_path):
    target = tmp_path / "target.db"
    assert migrate_cli("--from", str(sample_db), "--to", str(target)).returncode == 0
    before = dump(target)
    refused = migrate_cli("--from", str(generated), "--to", str(target))
    assert refused.returncode == 2
    line = one_line(refused.stderr)
    assert (
        line == "cpersona migrate: refused: the target holds 63 rows; pass --force to replace them"
    )
    assert dump(target) == before
    forced = migrate_cli("--from", str(generated), "--to", str(target), "--force")
    assert forced.returncode == 0, forced.stderr
    assert dump(target) == dump(generated)


def test_an_unfinished_migration_from_another_source_is_refused(generated, sample_db, tmp_path):
    target = tmp_path / "target.db"
    assert run(str(KILLED), str(generated), str(target), "100", "2").returncode == -9
    other = migrate_cli("--from", str(sample_db), "--to", str(target))
    assert other.returncode == 2
    line = one_line(other.stderr)
    assert line.startswith("cpersona migrate: refused: the target holds an unfinished migration")
    assert str(generated) in line and "--force" in line
    assert len(dump(target)["memories"]) == 200


def test_a_source_changed_since_the_kill_is_not_resumed(generated, tmp_path):
    target = tmp_path / "target.db"
    assert run(str(KILLED), str(generated), str(target), "100", "3").returncode == -9
    with closing(sqlite3.connect(generated)) as conn, conn:
        conn.execute("DELETE FROM memories WHERE id = 5")
    refused = migrate_cli("--from", str(generated), "--to", str(target))
    assert refused.returncode == 2
    assert "the source changed since the interrupted migration (memories: 299 rows" in one_line(
        refused.stderr
    )


def test_a_difference_fails_the_verification(generated, tmp_path):
    target = tmp_path / "target.db"
    db = open_database(str(target))
    try:  # a target that silently alters what it is given
        with db.atomic() as conn:
            conn.execute(
                "CREATE TRIGGER tamper AFTER INSERT ON memories WHEN new.id = 1234 BEGIN "
                "UPDATE memories SET content = 'altered' WHERE id = new.id; END"
            )
    finally:
        db.close()
    done = migrate_cli("--from", str(generated), "--to", str(target), "--sample", "5000")
    assert done.returncode == 1
    line = done.stderr.strip().splitlines()[-1]
    assert line.startswith(
        "cpersona migrate: verification failed: memories id=1234 differs in content (source 'note"
    )
    assert line.endswith("target 'altered')")


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        ("missing", "no database file at {src}"),
        ("text", "{src} is not an SQLite database (file is not a database)"),
        ("empty_sqlite", "{src} is not a cpersona or CPersona 2.5.x database"),
        ("v12", "{src} has schema version 12, older than 13: open it once with cpersona"),
    ],
)
def test_a_bad_source_is_one_line(tmp_path, make, expected):
    src = tmp_path / "source.db"
    if make == "text":
        src.write_text("not a database\n" * 100, encoding="utf-8")
    elif make == "empty_sqlite":
        with closing(sqlite3.connect(src)) as conn:
            conn.execute("CREATE TABLE other (x)")
    elif make == "v12":
        with closing(sqlite3.connect(src)) as conn, conn:
            conn.execute("CREATE TABLE memories (id INTEGER PRIMARY KEY, content TEXT)")
            conn.execute("CREATE TABLE schema_version (version INTEGER PRIMARY KEY)")
            conn.execute("INSERT INTO schema_version VALUES (12)")
    done = migrate_cli("--from", str(src), "--to", str(tmp_path / "t.db"))
    assert done.returncode == 2
    assert one_line(done.stderr).startswith(
        "cpersona migrate: refused: " + expected.format(src=src)
    )
    assert not (tmp_path / "t.db").exists()


def test_a_bad_target_is_one_line(generated, tmp_path):
    same = migrate_cli("--from", str(generated), "--to", str(generated))
    assert same.returncode == 2
    assert one_line(same.stderr) == (
        f"cpersona migrate: refused: the source and the target are the same database ({generated})"
    )
    folder = migrate_cli("--from", str(generated), "--to", str(tmp_path))
    assert folder.returncode == 2
    assert one_line(folder.stderr) == (
        f"cpersona migrate: refused: {tmp_path} is a directory, not a database file"
    )
    junk = tmp_path / "junk.db"
    junk.write_text("not a database\n" * 100, encoding="utf-8")
    junk.chmod(0o600)  # (a file others can read is warned about first)
    bad = migrate_cli("--from", str(generated), "--to", str(junk))
    assert bad.returncode == 2
    assert one_line(bad.stderr).startswith(f"cpersona migrate: refused: cannot use {junk} as")


def test_a_row_the_target_refuses_is_named(generated, tmp_path):
    with closing(sqlite3.connect(generated)) as conn, conn:
        # Locked duplicates keep 2.5.x from creating its dedup index; cpersona's target has it.
        conn.execute("DROP INDEX idx_memories_dedup_content")
        # Rows 1501 and 1561 share agent, project and channel (the generator cycles every 60).
        conn.execute("UPDATE memories SET content = 'twice', locked = 1 WHERE id IN (1501, 1561)")
    target = tmp_path / "target.db"
    done = migrate_cli("--from", str(generated), "--to", str(target), "--batch", "100")
    assert done.returncode == 1
    line = done.stderr.strip().splitlines()[-1]
    assert line.startswith(
        "cpersona migrate: failed: the target refuses memories id=1561: UNIQUE constraint failed"
    )
    # The 15 batches before the refused row's (id 1500 was deleted by the generator).
    assert [r[0] for r in dump(target)["memories"]][-2:] == [1499, 1501]


def test_the_copy_is_the_source_as_of_the_start_while_it_is_written(generated, tmp_path):
    before = dump(generated)
    target = tmp_path / "target.db"
    writer = sqlite3.connect(generated, isolation_level=None)

    def write_meanwhile(table: str, done: int) -> None:
        if table == "memories" and done == 500:  # a server goes on writing to the source
            writer.execute(
                "INSERT INTO memories(agent_id, content, timestamp) VALUES ('a', 'new', 't')"
            )
            writer.execute("DELETE FROM memories WHERE id IN (5, 2500)")
            writer.execute("UPDATE memories SET content = 'edited' WHERE id = 2600")

    src, dst = open_source(str(generated)), open_target(str(target))
    try:
        done = migrate(
            src, dst, source_location=str(generated), batch=500, after_batch=write_meanwhile,
            out=io.StringIO(),
        )  # fmt: skip
    finally:
        dst.close()
        src.close()
        writer.close()
    assert done.rows == sum(len(rows) for rows in before.values())
    assert dump(target) == before
    assert dump(generated) != before
