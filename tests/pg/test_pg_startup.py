"""Start-up on PostgreSQL: an unreachable server and a database without pgvector each stop
the server with one line on stderr that names the cause (and never the password)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import psycopg
from child_env import inherited
from pg_support import _server_uri, database_url

TIMEOUT = 60.0


def serve(url: str, tmp_path: Path) -> subprocess.CompletedProcess:
    env = inherited()
    env.update(
        CPERSONA_DB_PATH=str(tmp_path / "unused.db"),
        CPERSONA_EMBEDDING_MODE="hashing",
        CPERSONA_DATABASE_URL=url,
    )
    return subprocess.run(
        [sys.executable, "-m", "cpersona"],
        env=env,
        input="",
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        cwd=tmp_path,
    )


def test_unreachable_server_stops_with_one_line(tmp_path):
    out = serve("postgresql://cp:s3cret@127.0.0.1:1/cpersona", tmp_path)
    assert out.returncode != 0 and out.stdout == ""
    lines = out.stderr.splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("cpersona: cannot open the database postgresql://cp@127.0.0.1:1/")
    assert "cannot connect" in lines[0] and "s3cret" not in out.stderr
    assert not (tmp_path / "unused.db").exists()


def test_missing_vector_extension_stops_with_one_line_naming_pgvector(tmp_path):
    # A role that owns its database but may not create pgvector (not a trusted extension).
    role, name = f"cp_noext_{os.getpid()}", f"cpt_noext_{os.getpid()}"
    with psycopg.connect(_server_uri(), autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {name}")
        admin.execute(f"DROP ROLE IF EXISTS {role}")
        admin.execute(f"CREATE ROLE {role} LOGIN")
        admin.execute(f"CREATE DATABASE {name} OWNER {role} TEMPLATE template0")
    try:
        url = database_url(_server_uri(), name).replace("postgres:@", f"{role}@", 1)
        out = serve(url, tmp_path)
        assert out.returncode != 0 and out.stdout == ""
        lines = out.stderr.splitlines()
        assert len(lines) == 1, lines
        assert "pgvector" in lines[0] and "CREATE EXTENSION vector" in lines[0]
        # Nothing was created in the database.
        with psycopg.connect(url, autocommit=True) as conn:
            tables = conn.execute(
                "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'"
            ).fetchone()
        assert tables == (0,)
    finally:
        with psycopg.connect(_server_uri(), autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
            admin.execute(f"DROP ROLE IF EXISTS {role}")


def test_urls_in_messages_never_carry_the_password():
    from cpersona.storage.pg.connection import redact

    assert redact("postgresql://u:p%40ss@db.example:5432/mem?sslmode=require") == (
        "postgresql://u@db.example:5432/mem?sslmode=require"
    )
    assert redact("postgresql://db/mem?user=u&password=hunter2&x=1") == (
        "postgresql://db/mem?user=u&password=***&x=1"
    )
    assert redact("postgresql:///mem?host=/run/pg") == "postgresql:///mem?host=/run/pg"
    assert redact("host=db dbname=mem password='a b' user=u") == (
        "host=db dbname=mem password=*** user=u"
    )
