"""`cpersona migrate` to and from PostgreSQL: whole databases there and back, a SIGKILL in
either direction resumed, the vectors PostgreSQL cannot hold counted, one-line refusals."""

from __future__ import annotations

import sqlite3
from contextlib import closing

import psycopg
import pytest
from migrate_support import (
    KILLED,
    ODD_BLOB_IDS,
    QUERIES,
    dump,
    generate,
    migrate_cli,
    one_line,
    recall_answers,
    run,
    sequences,
    uncompared_tables,
)

pytestmark = pytest.mark.anyio


def pg_count(url: str, table: str) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()
        return int(row[0]) if row else -1


def without_odd_blobs(rows: dict[str, list[tuple[object, ...]]]) -> dict[str, list]:
    """`rows` as they come back from PostgreSQL: the generated blobs that are not float32
    vectors (memories 2, 3 and 4: odd length, empty, NaN) are NULL there."""
    out = dict(rows)
    out["memories"] = [
        (*r[:8], None, *r[9:]) if r[0] in ODD_BLOB_IDS else r for r in rows["memories"]
    ]
    return out


async def test_the_fixture_goes_to_postgresql_and_back_whole(sample_db, pg_url, tmp_path):
    there = migrate_cli("--from", str(sample_db), "--to", pg_url)
    assert there.returncode == 0, there.stderr
    assert "copied 63 rows (59 memories, 3 episodes, 1 profiles)" in there.stderr
    assert pg_count(pg_url, "memories") == 59
    back = tmp_path / "back.db"
    home = migrate_cli("--from", pg_url, "--to", str(back))
    assert home.returncode == 0, home.stderr
    # Every row of every table the 2.5.12 file holds, field by field (FTS5's are derived).
    assert uncompared_tables(sample_db) == set() == uncompared_tables(back)
    assert dump(back) == dump(sample_db)
    # The identity travelled through PostgreSQL's sequence: id 60 (deleted) stays used.
    assert sequences(back)["memories"] == 60
    assert await recall_answers(back) == await recall_answers(sample_db)


async def test_a_generated_database_goes_to_postgresql_and_back(generated, pg_url, tmp_path):
    there = migrate_cli("--from", str(generated), "--to", pg_url, "--batch", "256")
    assert there.returncode == 0, there.stderr
    assert (
        "cpersona migrate: 3 stored embeddings are not whole float32 vectors and are empty "
        "(NULL) in the target: those rows recall by text only"
    ) in there.stderr
    back = tmp_path / "back.db"
    home = migrate_cli("--to", str(back), env={"CPERSONA_DATABASE_URL": pg_url})
    assert home.returncode == 0, home.stderr
    assert "3 stored embeddings" not in home.stderr
    assert uncompared_tables(generated) == set() == uncompared_tables(back)
    assert dump(back) == without_odd_blobs(dump(generated))
    assert sequences(back) == sequences(generated)


async def test_recall_answers_the_same_after_a_round_trip(tmp_path, pg_url):
    source = tmp_path / "source.db"
    generate(source, 1500, odd_blobs=False)
    back = tmp_path / "back.db"
    assert migrate_cli("--from", str(source), "--to", pg_url).returncode == 0
    assert migrate_cli("--from", pg_url, "--to", str(back)).returncode == 0
    want = await recall_answers(source)
    assert sum(len(a["messages"]) for a in want) > 2 * len(QUERIES)
    assert await recall_answers(back) == want


async def test_recall_answers_the_same_on_postgresql(sample_db, pg_url):
    assert migrate_cli("--from", str(sample_db), "--to", pg_url).returncode == 0
    want = await recall_answers(sample_db)
    assert await recall_answers(sample_db, database_url=pg_url) == want


def test_a_killed_migration_to_postgresql_resumes(generated, pg_url, tmp_path):
    killed = run(str(KILLED), str(generated), pg_url, "100", "7")
    assert killed.returncode == -9, killed.stderr
    assert pg_count(pg_url, "memories") == 700
    again = migrate_cli("--from", str(generated), "--to", pg_url, "--batch", "100")
    assert again.returncode == 0, again.stderr
    assert "resuming the migration from" in again.stderr
    assert "memories 800/2,998" in again.stderr
    back = tmp_path / "back.db"
    assert migrate_cli("--from", pg_url, "--to", str(back)).returncode == 0
    assert dump(back) == without_odd_blobs(dump(generated))


def test_a_killed_migration_from_postgresql_resumes(generated, pg_url, tmp_path):
    assert migrate_cli("--from", str(generated), "--to", pg_url).returncode == 0
    target = tmp_path / "back.db"
    killed = run(str(KILLED), pg_url, str(target), "100", "12")
    assert killed.returncode == -9, killed.stderr
    assert len(dump(target)["memories"]) == 1200
    again = migrate_cli("--from", pg_url, "--to", str(target), "--batch", "100")
    assert again.returncode == 0, again.stderr
    assert "resuming the migration from" in again.stderr
    assert dump(target) == without_odd_blobs(dump(generated))


def test_postgresql_refusals_are_one_line(generated, sample_db, pg_url, tmp_path):
    nobody = "postgresql://someone:s3cret@127.0.0.1:9/nowhere"
    unused = tmp_path / "x.db"
    for args in (
        ("--from", str(generated), "--to", nobody),
        ("--from", nobody, "--to", str(unused)),
    ):
        done = migrate_cli(*args)
        assert done.returncode == 2
        line = one_line(done.stderr)
        assert line.startswith(
            "cpersona migrate: refused: postgresql://someone@127.0.0.1:9/nowhere: cannot connect"
        )
        assert "s3cret" not in done.stderr
    assert migrate_cli("--from", str(generated), "--to", pg_url).returncode == 0
    again = migrate_cli("--from", str(generated), "--to", pg_url)
    assert again.returncode == 2
    assert one_line(again.stderr) == (
        "cpersona migrate: refused: the target holds 3308 rows; pass --force to replace them"
    )
    assert not unused.exists()
    forced = migrate_cli("--from", str(sample_db), "--to", pg_url, "--force")
    assert forced.returncode == 0, forced.stderr
    assert pg_count(pg_url, "memories") == 59 and pg_count(pg_url, "episodes") == 3


def test_text_postgresql_cannot_hold_is_named(sample_db, pg_url):
    with closing(sqlite3.connect(sample_db)) as conn, conn:
        conn.execute("UPDATE memories SET content = 'a' || char(0) || 'b' WHERE id = 7")
    done = migrate_cli("--from", str(sample_db), "--to", pg_url)
    assert done.returncode == 1
    assert (
        done.stderr.strip()
        .splitlines()[-1]
        .startswith(
            "cpersona migrate: failed: the target refuses memories id=7: PostgreSQL text fields "
            "cannot contain NUL (0x00) bytes"
        )
    )
    assert pg_count(pg_url, "memories") == 0
