"""A redacted credential is nowhere on disk (issue 22): a real `python -m cpersona` server, with
debug logging and SQL tracing on, takes credentials through every write that takes text, then
serves recalls (which bring both index files current) and an export. The original values are
then looked for, as bytes, in the database file, its WAL, the vector and full-text index
files beside it, the export, and the server's log (stderr). SQLite only: PostgreSQL's files
are the database server's, not this process's.
"""

from __future__ import annotations

import json
from pathlib import Path

from support.stdio_server import RawServer

SECRETS = {
    "github_token": "ghp_" + "Lk7" * 12,
    "aws_access_key_id": "AKIA" + "Q7XR2M4N6P8T3V5W",
    "password": "c0rrect-h0rse-9",
    "jwt": (
        "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0"
        ".SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"
    ),
    "url_password": "pg-pa55-word",
    "private_key": "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7",
}
PEM = f"-----BEGIN PRIVATE KEY-----\n{SECRETS['private_key']}\n-----END PRIVATE KEY-----"


def files_holding(paths: list[Path], value: str) -> list[str]:
    needle = value.encode()
    return [p.name for p in paths if p.exists() and needle in p.read_bytes()]


def test_a_redacted_secret_is_absent_from_every_file_and_the_log(tmp_path: Path) -> None:
    db = tmp_path / "mem.db"
    imported = tmp_path / "in.jsonl"
    imported.write_text(
        json.dumps(
            {"_type": "memory", "agent_id": "alice", "content": f"imported {SECRETS['jwt']}"}
        )
        + "\n",
        encoding="utf-8",
    )
    export = tmp_path / "out.jsonl"
    server = RawServer(db, {"CPERSONA_LOG_LEVEL": "debug", "CPERSONA_SQL_TRACE": "true"})
    try:
        server.initialize()
        stored = server.tool(
            "store",
            {
                "agent_id": "alice",
                "message": {
                    "content": f"token {SECRETS['github_token']} "
                    f"key {SECRETS['aws_access_key_id']}",
                    "metadata": {"password": SECRETS["password"]},
                },
            },
        )
        assert stored["redacted"] == {"aws_access_key_id": 1, "github_token": 1, "password": 1}
        url = f"postgres://app:{SECRETS['url_password']}@db.internal/app"
        updated = server.tool(
            "update_memory", {"memory_id": stored["id"], "content": f"moved to {url}"}
        )
        assert updated["redacted"] == {"url_password": 1}
        assert server.tool("store", {"agent_id": "alice", "message": {"content": PEM}})["ok"]
        assert server.tool(
            "archive_episode", {"agent_id": "alice", "summary": f"rotated {SECRETS['jwt']}"}
        )["ok"]
        assert server.tool(
            "update_profile", {"agent_id": "alice", "profile": f"password={SECRETS['password']}"}
        )["ok"]
        assert server.tool("import_memories", {"input_path": str(imported)})["redacted"] == {
            "jwt": 1
        }
        for query in ["token key", "moved", "rotated", "imported", "private key"]:
            assert "messages" in server.tool("recall", {"agent_id": "alice", "query": query})
        # A recall by a token is no write, but the SQL trace would show it bound: redacted too.
        recall = {"agent_id": "alice", "query": SECRETS["github_token"]}
        assert "messages" in server.tool("recall", recall)
        assert server.tool("export_memories", {"agent_id": "alice", "output_path": str(export)})[
            "ok"
        ]
        files = [
            db,
            Path(f"{db}-wal"),
            *(
                Path(f"{db}.{t}.{kind}")
                for t in ("memories", "episodes")
                for kind in ("vec", "fts")
            ),
            export,
        ]
        assert [f.name for f in files if not f.exists()] == []  # each one is really looked at
        running = [(k, f) for k, v in SECRETS.items() for f in files_holding(files, v)]
    finally:
        assert server.close() == 0
    log = server.stderr
    assert "sql: INSERT INTO memories" in log  # the log is the debug one, SQL included
    assert "credentials: redacted before anything is written (CPERSONA_SECRETS=redact)" in log
    assert running == []
    closed = [db, Path(f"{db}-wal"), export]  # after the close's checkpoint
    assert [(k, f) for k, v in SECRETS.items() for f in files_holding(closed, v)] == []
    assert [kind for kind, value in SECRETS.items() if value in log] == []
    dumped = export.read_text(encoding="utf-8")
    assert "[REDACTED:url_password]" in dumped and "[REDACTED:private_key]" in dumped
