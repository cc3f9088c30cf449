"""The checkup CLI: exit codes a CI job can gate on, JSON output, read-only report runs."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cpersona.commands.checkup import main
from cpersona.engine import Engine
from health_support import hours_ago, plant


@pytest.fixture(autouse=True)
def _env(monkeypatch: pytest.MonkeyPatch, oc_path: Path) -> None:
    monkeypatch.setenv("CPERSONA_EMBEDDING_MODE", "hashing")
    monkeypatch.setenv("CPERSONA_OPERATING_CONTEXT_PATH", str(oc_path))
    monkeypatch.delenv("CPERSONA_DB_PATH", raising=False)


def _database(make_engine: Callable[..., Engine], *damage: str) -> str:
    engine = make_engine()
    with engine.db.atomic() as conn:
        for i in range(4):
            conn.execute(
                "INSERT INTO memories(agent_id, content, timestamp, source) VALUES "
                "('a', ?, '2024-01-01T00:00:00+00:00', ?)",
                (f"note {i}", '{"type": "User", "id": "u", "name": "U"}'),
            )
    engine.writer.update_profile("a", "likes notes")
    plant(engine, "UPDATE memories SET embedding = NULL")
    plant(engine, *damage) if damage else None
    target = _target(engine)
    engine.close()
    return target


def _target(engine: Engine) -> str:
    """What `--db` names: the SQLite file, or the PostgreSQL database's URL."""
    return engine.settings.database_url or engine.settings.db_path


def _digest(path: str) -> dict[str, str]:
    """Hashes of the database and of a non-empty WAL (SQLite itself may leave an empty WAL and
    a shared-memory index behind a read-only WAL reader: they carry no data); on PostgreSQL,
    of every row of every table of the database's schema."""
    if path.startswith("postgresql://"):
        return _pg_digest(path)
    out = {}
    for suffix in ("", "-wal"):
        file = Path(path + suffix)
        if file.exists() and file.stat().st_size:
            out[suffix] = hashlib.sha256(file.read_bytes()).hexdigest()
    return out


def _pg_digest(url: str) -> dict[str, str]:
    import psycopg

    out = {}
    with psycopg.connect(url, autocommit=True) as conn:
        tables = conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = "
            "current_schema() AND table_type = 'BASE TABLE' ORDER BY 1"
        ).fetchall()
        for (table,) in tables:
            rows = conn.execute(f'SELECT t::text FROM "{table}" t ORDER BY 1').fetchall()
            out[table] = hashlib.sha256(repr(rows).encode()).hexdigest()
    return out


def test_checkup_exit_codes_follow_the_verdict(
    make_engine: Callable[..., Engine], capsys: pytest.CaptureFixture[str]
) -> None:
    # Rows without vectors (every one: critical) -> 2; --fix re-embeds -> 0 after.
    path = _database(make_engine)
    before = _digest(path)
    assert main(["--db", path]) == 2
    assert _digest(path) == before  # report-only: nothing written
    out = capsys.readouterr().out
    assert out.startswith("cpersona checkup: 4 memories, 1 critical / 0 warn / ")
    assert "[critical] null_embedding: " in out and out.rstrip().endswith("exit=2 (unhealthy)")
    assert main(["--db", path, "--fix"]) == 0
    assert "(fix applied)" in capsys.readouterr().out
    assert main(["--db", path]) == 0


def test_checkup_degraded_is_one_and_json(
    make_engine: Callable[..., Engine], capsys: pytest.CaptureFixture[str]
) -> None:
    path = _database(
        make_engine,
        "INSERT INTO pending_memory_tasks(task_type, agent_id, payload, created_at) "
        f"VALUES ('update_profile', 'a', '{{}}', '{hours_ago(3)}')",
    )
    assert main(["--db", path, "--fix", "--json", "--deep"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["fixed"] is True and report["status"] == "healthy"
    assert set(report["deep"]) == {"a"} and "short_content" in report["deep"]["a"]["results"]
    engine = make_engine()
    plant(
        engine,
        "INSERT INTO pending_memory_tasks(task_type, agent_id, payload, created_at) "
        f"VALUES ('update_profile', 'a', '{{}}', '{hours_ago(3)}')",
    )
    engine.close()
    assert main(["--db", path, "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["status"] == "degraded" and report["fixed"] is False
    assert main(["--db", path, "--strict"]) == 1


def test_checkup_could_not_run_is_three(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Nothing listens on port 1: PostgreSQL cannot be reached.
    assert main(["--db", "postgresql://nobody@127.0.0.1:1/none?connect_timeout=2"]) == 3
    assert "could not run on postgresql://nobody@127.0.0.1:1/none" in capsys.readouterr().err
    missing = tmp_path / "nowhere.db"
    assert main(["--db", str(missing)]) == 3
    assert not missing.exists()  # report-only never creates a database
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"this is not sqlite" * 100)
    assert main(["--db", str(garbage)]) == 3
    assert "could not run" in capsys.readouterr().err


def test_checkup_opens_a_2_5_12_database_read_only(tmp_path: Path, store_backend: str) -> None:
    if store_backend == "postgresql":
        pytest.skip("a CPersona 2.5.12 database is an SQLite file (migrate's tests move it)")
    fixture = Path("/work/shared/fixtures/cpersona-2.5.12-sample.db")
    if not fixture.exists():
        pytest.skip("the 2.5.12 fixture is not available")
    for suffix in ("", "-wal", "-shm"):
        if Path(f"{fixture}{suffix}").exists():
            shutil.copy(f"{fixture}{suffix}", tmp_path / f"old.db{suffix}")
    path = str(tmp_path / "old.db")
    os.chmod(path, 0o600)
    before = _digest(path)
    # Hashing vectors of another embedder: the model check sees it (degraded), nothing else.
    assert main(["--db", path, "--json"]) == 1
    assert _digest(path) == before
    assert not any(p.name.endswith((".vec", ".vec.lock")) for p in tmp_path.iterdir())


def test_checkup_as_a_module(make_engine: Callable[..., Engine]) -> None:
    target = _database(make_engine)
    variable = "CPERSONA_DATABASE_URL" if target.startswith("postgresql://") else "CPERSONA_DB_PATH"
    env: dict[str, Any] = {**os.environ, variable: target}
    done = subprocess.run(
        [sys.executable, "-m", "cpersona.checkup"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert "exit=2 (unhealthy)" in done.stdout


def test_checkup_fix_redacts_stored_credentials_and_rewrites_the_index_files(
    make_engine: Callable[..., Engine], capsys: pytest.CaptureFixture[str]
) -> None:
    """Rows written under CPERSONA_SECRETS=allow (or by 2.5.x): the report names ids and kinds
    only; --fix redacts them in SQLite and in both index files (issue 22)."""
    token = "xoxb-" + "1234567890-" * 2 + "Ab3dEf6hIj9kLm2nOp5qRs8t"
    engine = make_engine(secrets="allow")
    engine.writer.store("a", {"content": f"slack bot {token}"}, "", "")
    engine.warm_indexes()  # the index files exist and hold the row
    target = _target(engine)
    # The full-text file first; PostgreSQL has no vector file (its full-text one is in this
    # host's cache directory).
    files = [
        engine.fts["memories"].path,
        *(i.path for t, i in engine.indexes.items() if t == "memories"),
    ]
    engine.close()
    assert main(["--db", target, "--json"]) == 1
    out = capsys.readouterr().out
    assert token not in out
    (found,) = [i for i in json.loads(out)["issues"] if i["check"] == "stored_credentials"]
    assert found["kinds"] == {"slack_token": 1} and found["sample_ids"] == [1]
    assert token.encode() in files[0].read_bytes()  # the full-text file: what the fix must remove
    assert main(["--db", target, "--fix", "--json"]) == 0
    assert token not in capsys.readouterr().out
    assert all(f.exists() for f in files)
    assert [f.name for f in files if token.encode() in f.read_bytes()] == []
    engine = make_engine()
    listed = engine.db.query("SELECT content FROM memories")
    assert [tuple(r) for r in listed] == [("slack bot [REDACTED:slack_token]",)]
