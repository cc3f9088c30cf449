"""`cpersona export PATH` / `cpersona import PATH --agent ID` as an operator runs them: a JSON
summary on stdout, progress of a long import on stderr, exit code 1 on a refusal."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from child_env import inherited
from portability_support import read_jsonl

TIMEOUT = 120


def run(args: list[str], db: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = inherited("SYSTEMROOT")
    env.update(
        CPERSONA_DB_PATH=str(db),
        CPERSONA_EMBEDDING_MODE="hashing",
        CPERSONA_OPERATING_CONTEXT_PATH=str(cwd / "no-oc.toml"),
        # Confines MCP callers only: the operator's command line may write elsewhere.
        CPERSONA_EXPORT_DIR=str(cwd / "confined"),
    )
    return subprocess.run(
        [sys.executable, "-m", "cpersona", *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )


def test_portability_cli_import_then_export(tmp_path: Path):
    source = tmp_path / "hand-made.jsonl"
    n = 2100  # over the progress interval
    source.write_text(
        "".join(
            json.dumps({"_type": "memory", "agent_id": "someone", "content": f"note {i}"}) + "\n"
            for i in range(n)
        ),
        encoding="utf-8",
    )
    db = tmp_path / "cli.db"

    out = run(["import", str(source), "--agent", "ops"], db, tmp_path)
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout)
    assert summary["imported_memories"] == n and summary["embedded_on_import"] == n
    assert f"import: 2000/{n} records written" in out.stderr
    assert f"import: {n}/{n} records written" in out.stderr

    backup = tmp_path / "elsewhere" / "backup.jsonl"
    out = run(["export", str(backup), "--agent", "ops", "--embeddings"], db, tmp_path)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["memories"] == n
    records = read_jsonl(backup)
    assert records[0]["memory_count"] == n
    assert {r["agent_id"] for r in records[1:]} == {"ops"}
    assert all("embedding_b64" in r for r in records[1:])

    out = run(["import", str(tmp_path / "missing.jsonl")], db, tmp_path)
    assert out.returncode == 1
    assert json.loads(out.stdout)["error"].startswith("File not found: ")
