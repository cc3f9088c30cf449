"""The stdio banner names the database the server really uses (issue 23 found it printing the
SQLite path on PostgreSQL) and a registration entry a client can paste."""

from __future__ import annotations

import json
import os

from cpersona.config import Settings
from cpersona.server.banner import stdio_banner


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
