"""The stdio banner names the database the server really uses (issue 23 found it printing the
SQLite path on PostgreSQL) and a registration entry a client can paste."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from cpersona.config import Settings
from cpersona.derived.healing import INLINE_ROWS
from cpersona.server.banner import stdio_banner
from cpersona.storage import open_database


def _entry(text: str) -> dict[str, object]:
    line = next(ln for ln in text.splitlines() if "register with an MCP client:" in ln)
    return json.loads(line.split("register with an MCP client:", 1)[1])


def test_on_sqlite_the_banner_names_the_absolute_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    text = stdio_banner(Settings.from_env({"CPERSONA_DB_PATH": "mem.db"}), "hashing")
    path = os.path.join(str(tmp_path), "mem.db")
    assert f"  database: {path}" in text.splitlines()
    assert _entry(text)["mcpServers"]["cpersona"]["env"] == {"CPERSONA_DB_PATH": path}


def test_on_postgresql_the_banner_names_the_url_without_its_password():
    url = "postgresql://ann:s3cret@db.example:5432/memory"
    text = stdio_banner(Settings.from_env({"CPERSONA_DATABASE_URL": url}), "hashing")
    assert "s3cret" not in text
    lines = text.splitlines()
    database = next(ln for ln in lines if ln.startswith("  database: "))
    assert "db.example:5432/memory" in database
    env = _entry(text)["mcpServers"]["cpersona"]["env"]
    assert list(env) == ["CPERSONA_DATABASE_URL"]
    assert "db.example" in env["CPERSONA_DATABASE_URL"]


def test_a_path_with_a_quote_stays_valid_json(tmp_path):
    odd = str(tmp_path / 'my "memories".db')
    text = stdio_banner(Settings.from_env({"CPERSONA_DB_PATH": odd}), "hashing")
    assert _entry(text)["mcpServers"]["cpersona"]["env"]["CPERSONA_DB_PATH"] == odd


def _started(db: Path) -> list[str]:
    """The stderr lines of a stdio server on `db` whose client leaves at once."""
    r = subprocess.run(
        [sys.executable, "-m", "cpersona"],
        env={**os.environ, "CPERSONA_DB_PATH": str(db), "CPERSONA_EMBEDDING_MODE": "none"},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    return r.stderr.splitlines()


def _filled(path: Path, rows: int) -> Path:
    """A database of `rows` memories written without cpersona's index files (as CPersona
    2.5.x leaves them)."""
    db = open_database(str(path))
    with db.atomic() as conn:
        conn.executemany(
            "INSERT INTO memories(agent_id, content, timestamp) VALUES ('a', ?, '')",
            [(f"memory number {i}",) for i in range(rows)],
        )
    db.close()
    for table in ("memories", "episodes"):
        for kind in ("vec", "fts"):
            Path(f"{path}.{table}.{kind}").unlink(missing_ok=True)
    return path


def _index_line(lines: list[str]) -> str | None:
    return next((ln for ln in lines if ln.startswith("  index files:")), None)


def test_a_large_store_without_index_files_says_what_the_first_minutes_hold(tmp_path):
    db = _filled(tmp_path / "big.db", INLINE_ROWS + 500)
    line = _index_line(_started(db))
    assert line is not None
    assert f"not built yet (vectors, full text of {INLINE_ROWS + 500:,} memories)" in line
    assert "`cpersona index rebuild` builds them ahead" in line
    # Built ahead, as the line says: the next start has nothing to say.
    r = subprocess.run(
        [sys.executable, "-m", "cpersona", "index", "rebuild"],
        env={**os.environ, "CPERSONA_DB_PATH": str(db), "CPERSONA_EMBEDDING_MODE": "none"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    assert _index_line(_started(db)) is None


def test_a_small_store_builds_in_its_first_call_and_says_nothing(tmp_path):
    assert _index_line(_started(_filled(tmp_path / "small.db", 50))) is None
