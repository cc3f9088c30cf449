"""The PostgreSQL schema emulates nothing of SQLite (issue 18), made new or upgraded in place.

What the schema owns is listed from the catalogue (pg_proc and pg_views of the cpersona
schema, the extension's own objects left out): no function, aggregate or view re-implements
SQLite, and every function cpersona owns is one of the few documented below. A schema made by
the release before the change (its code taken from git, run in a child process) upgrades at
start with every row, id, key and order unchanged.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from child_env import inherited
from cpersona.models import NewMemory
from cpersona.storage import open_database
from cpersona.storage.memories import insert
from pg_support import drop_database, fresh_database

REPO = Path(__file__).resolve().parents[2]
#: The last commit whose PostgreSQL schema carried the SQLite emulations.
BEFORE = "4bd01fd"

#: The functions cpersona owns in the schema, each documented where it is created: the
#: full-text log and re-embedding triggers (storage/pg/schema.py `_triggers`) and the dedup
#: indexes' SHA-256 key (`TEXT_KEY_FUNCTION`: convert_to is not immutable).
OWNED = {
    "cpersona_fts_log",
    "cpersona_reembed_drop",
    "cpersona_text_key",
    "cpersona_vector_log",
    # 2.6's delete cascades of the declared associations (issue 32), as plpgsql triggers.
    "cpersona_associations_entity_ad",
    "cpersona_associations_record_ad",
}
#: Names that would say a function stands in for one of SQLite's.
SQLITE_NAMES = re.compile(
    r"^(datetime|date|time|julianday|strftime|unixepoch|json_.*|instr|ifnull|total|glob|"
    r"sqlite_.*|length|lower|upper|substr|printf|iif)$"
)


def objects(url: str) -> tuple[dict[str, str], set[str]]:
    """({function or aggregate name: its kind}, {view name}) the current schema owns, beside
    what an extension installed."""
    with psycopg.connect(url, autocommit=True) as conn:
        procs = conn.execute(
            """SELECT p.proname, p.prokind FROM pg_proc p
               JOIN pg_namespace n ON n.oid = p.pronamespace
               WHERE n.nspname = current_schema() AND NOT EXISTS (
                   SELECT 1 FROM pg_depend d WHERE d.classid = 'pg_proc'::regclass
                   AND d.objid = p.oid AND d.deptype = 'e')"""
        ).fetchall()
        views = conn.execute(
            "SELECT viewname FROM pg_views WHERE schemaname = current_schema()"
        ).fetchall()
    return {str(name): str(kind) for name, kind in procs}, {str(v) for (v,) in views}


def assert_native(url: str) -> None:
    procs, views = objects(url)
    assert {n for n in procs if SQLITE_NAMES.match(n)} == set()
    assert {n for n, kind in procs.items() if kind == "a"} == set()  # no aggregate
    assert set(procs) == OWNED
    assert views == set()


def test_a_new_schema_emulates_nothing(pg_url: str) -> None:
    assert_native(pg_url)


# -- an upgrade from the release before -------------------------------------------------------

#: Run by the old code in a child process: its schema, and rows through its own storage.
_OLD_WRITER = """
import sys
from cpersona.models import NewMemory
from cpersona.storage import open_database
from cpersona.storage.memories import insert

db = open_database("", database_url=sys.argv[1], pool_size=1)
stamps = ["2026-01-02T03:04:05+00:00", "2026-01-02 03:04:05", "garbage", "", "2025-12-31"]
sources = ['{"id": "chat-1"}', '{"id": 17}', '{"x": 1}', "not json", '{"id": true}']
with db.atomic() as conn:
    for i in range(40):
        insert(conn, NewMemory(
            agent_id="a" if i % 3 else "b", project_id="", msg_id=f"m{i}", content=f"row {i}",
            source=sources[i % len(sources)], timestamp=stamps[i % len(stamps)],
            metadata="{}", channel="", embedding=bytes(4 * 3) if i % 2 else None,
        ))
    # created_at in each form a row can hold (ties, a non-canonical import, SQLite's day 31).
    conn.execute("UPDATE memories SET created_at = '2026-01-01 00:00:00' WHERE id <= 10")
    conn.execute("UPDATE memories SET created_at = '2026-04-31 12:00:00' WHERE id = 11")
    conn.execute("UPDATE memories SET created_at = '2026-01-01T00:00:00.5Z' WHERE id = 12")
    conn.execute(
        "INSERT INTO episodes (agent_id, summary, start_time, end_time) VALUES (?, ?, ?, ?)",
        ("a", "an episode", "2026-01-02T03:04:05+00:00", "2026-01-02T04:00:00+00:00"),
    )
    conn.execute("INSERT INTO profiles (agent_id, user_id, content) VALUES ('a', '', 'p')")
    conn.execute("DELETE FROM memories WHERE id = 40")  # the next id is 41, not 40
db.close()
"""

_TABLES = {
    "memories": "id, agent_id, project_id, msg_id, content, source, timestamp, metadata, "
    "CAST(embedding AS text), channel, recall_count, last_recalled_at, locked, created_at",
    "episodes": "id, agent_id, project_id, summary, keywords, start_time, end_time, resolved, "
    "channel, created_at",
    "profiles": "id, agent_id, project_id, user_id, content, updated_at",
}
_KEYS = {
    "memories": "id, created_key, instant_key, source_id",
    "episodes": "id, created_key, instant_key",
}


def _read(url: str, columns: dict[str, str]) -> dict[str, list[tuple[Any, ...]]]:
    with psycopg.connect(url, autocommit=True) as conn:
        return {
            t: [tuple(r) for r in conn.execute(f"SELECT {c} FROM {t} ORDER BY id").fetchall()]
            for t, c in columns.items()
        }


@pytest.fixture
def before_tree() -> Iterator[Path]:
    """The package as of `BEFORE`, from this repository's history."""
    if shutil.which("git") is None:
        pytest.skip("git is needed to read the release before from history")
    out = Path(tempfile.mkdtemp(prefix="cpersona-before-"))
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", BEFORE, "python/cpersona"],
        capture_output=True,
        check=False,
    )
    if archive.returncode != 0:
        shutil.rmtree(out)
        pytest.skip(f"commit {BEFORE} is not in this clone's history")
    tar = out / "tree.tar"
    tar.write_bytes(archive.stdout)
    with tarfile.open(tar) as f:
        f.extractall(out, filter="data")
    yield out / "python"
    shutil.rmtree(out)


@pytest.fixture
def empty_url() -> Iterator[str]:
    """A database with nothing of cpersona's in it."""
    url = fresh_database()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("DROP SCHEMA public CASCADE")
        conn.execute("CREATE SCHEMA public")
    yield url
    drop_database(url)


def test_a_schema_of_the_release_before_upgrades_in_place(
    before_tree: Path, empty_url: str
) -> None:
    env = {**inherited(), "PYTHONPATH": str(before_tree)}
    made = subprocess.run(
        [sys.executable, "-c", _OLD_WRITER, empty_url],
        env=env,
        cwd=tempfile.gettempdir(),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert made.returncode == 0, made.stderr
    procs, views = objects(empty_url)
    assert {"julianday", "cpersona_time_key", "total"} <= set(procs) and "sqlite_master" in views
    rows, keys = _read(empty_url, _TABLES), _read(empty_url, _KEYS)

    db = open_database("", database_url=empty_url, pool_size=1)  # migrates
    try:
        assert _read(empty_url, _TABLES) == rows
        # The keys the plpgsql readers computed, computed again by the generated columns:
        # the window order and its ties are the old ones.
        assert _read(empty_url, _KEYS) == keys
        assert_native(empty_url)
        with db.atomic() as conn:
            new = insert(
                conn,
                NewMemory("a", "", "", "after", "{}", "2026-02-01", "{}", "", None),
            )
        assert new == 41
        row = db.query_one("SELECT created_at, created_key FROM memories WHERE id = ?", (new,))
        assert row is not None and re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", row[0])
        assert row[1] > 0
    finally:
        db.close()
