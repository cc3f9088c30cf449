"""Every file and directory cpersona creates is its owner's only (issue 33 item 3): 0600 and
0700 under the usual umask 022, as a user meets them. A whole session runs as a user runs it,
a real MCP client on the stdio server and the commands as processes, on both backends; then
every file and directory it left is walked and its mode checked, and the files that hold the
memories (the full-text segment above all, 0644 before) are checked to be among them.

The umask is set in this process and inherited by every process it starts."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from child_env import inherited
from cpersona.fts import segment
from mcp import Client, StdioServerParameters
from support.stdio_server import RawServer

pytestmark = pytest.mark.anyio

#: Seconds one command or one tool call may take before the test fails (no timing claim).
WAIT = 180
#: Rows imported: enough for the full-text index to map its postings from a segment file.
IMPORTED = segment.MIN_ROWS + 100


@pytest.fixture
def usual_umask() -> Iterator[None]:
    previous = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(previous)


#: Not cpersona's: onnxruntime keeps a device id of its own under ~/.cache (no memory in it).
ONNXRUNTIME_OWN = Path("home/.cache/Microsoft")


def modes_left(root: Path, given: set[Path]) -> dict[str, str]:
    """Every path under `root` (not `root` itself, nor the test's own `given` files) whose mode
    is not 0600 for a file or 0700 for a directory: {relative path: its mode}."""
    wrong = {}
    for where, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(where) / name
            if path in given or path.relative_to(root).is_relative_to(ONNXRUNTIME_OWN):
                continue
            info = path.lstat()
            want = 0o700 if stat.S_ISDIR(info.st_mode) else 0o600
            if stat.S_IMODE(info.st_mode) != want:
                wrong[str(path.relative_to(root))] = oct(stat.S_IMODE(info.st_mode))
    return wrong


def names(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def jsonl(path: Path, agent: str, count: int) -> Path:
    """An export file of `count` memories (the format `cpersona export` writes)."""
    head = {
        "_type": "header",
        "version": "cpersona-export/1.0",
        "agent_id": agent,
        "exported_at": "2026-01-01T00:00:00+00:00",
        "memory_count": count,
        "episode_count": 0,
        "has_profile": False,
        "profile_count": 0,
    }
    lines = [json.dumps(head)]
    for i in range(count):
        words = f"imported note {i} about harbour {i % 37} and lantern {i % 11}"
        lines.append(json.dumps({"_type": "memory", "agent_id": agent, "content": words}))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


class Session:
    """The environment of one user's session: the server's and the commands' settings, all
    paths under `root` (HOME too, so a write to ~ would be walked)."""

    def __init__(self, root: Path, db: Path, database_url: str | None) -> None:
        self.root = root
        self.env = {
            **inherited(),
            "HOME": str(root / "home"),
            "XDG_CACHE_HOME": str(root / "home" / ".cache"),
            "CPERSONA_DB_PATH": str(db),
            "CPERSONA_EMBEDDING_MODE": "hashing",
            "CPERSONA_CACHE_DIR": str(root / "cache"),
        }
        if database_url is not None:
            self.env["CPERSONA_DATABASE_URL"] = database_url

    def run(self, *args: str, **env: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "cpersona", *args],
            env={**self.env, **env},
            cwd=self.root,
            capture_output=True,
            text=True,
            timeout=WAIT,
        )
        assert done.returncode == 0, (args, done.stderr)
        return done.stderr

    async def tools(self, calls: list[tuple[str, dict[str, Any]]]) -> list[dict[str, Any]]:
        """Each call's decoded answer, through the MCP client on a stdio server."""
        params = StdioServerParameters(
            command=sys.executable, args=["-m", "cpersona"], env=self.env, cwd=self.root
        )
        out = []
        with anyio.fail_after(WAIT):
            async with Client(params) as client:
                for name, args in calls:
                    result = await client.call_tool(name, args)
                    assert not result.is_error, (name, result.content[0].text)
                    out.append(json.loads(result.content[0].text))
        return out

    def handshake(self) -> None:
        """initialize and tools/list as most clients send them (the MCP SDK's own client adds
        fields that keep its handshake from being recorded): the server records its answers."""
        server = RawServer(
            Path(self.env["CPERSONA_DB_PATH"]),
            self.env,
            stderr_path=self.root.parent / "handshake.stderr",
        )
        try:
            assert "result" in server.initialize()
            assert "result" in server.call("tools/list")
        finally:
            assert server.close() == 0


def conversation(export: Path) -> list[tuple[str, dict[str, Any]]]:
    """What an agent does in a session that writes: memories, an episode, a profile, recalls,
    a calibration (its sidecar), an export, a health check."""
    calls: list[tuple[str, dict[str, Any]]] = [
        ("store", {"agent_id": "a", "message": {"content": f"the lantern {i} hangs by the door"}})
        for i in range(14)
    ]
    calls += [
        ("archive_episode", {"agent_id": "a", "summary": "we hung lanterns", "history": []}),
        ("update_profile", {"agent_id": "a", "profile": "likes lanterns"}),
        ("recall", {"agent_id": "a", "query": "lantern door"}),
        ("calibrate_threshold", {"agent_id": "a", "method": "zscore"}),
        ("export_memories", {"agent_id": "a", "output_path": str(export)}),
        ("check_health", {}),
    ]
    return calls


async def test_a_sqlite_session_leaves_only_private_files(tmp_path: Path, usual_umask: None):
    root = tmp_path / "session"
    root.mkdir()
    db = root / "data" / "mem.db"  # its directory made by the server
    s = Session(root, db, None)
    given = {jsonl(root / "notes.jsonl", "a", IMPORTED)}

    answers = await s.tools(conversation(root / "exports" / "by-tool.jsonl"))
    s.handshake()
    assert answers[-3]["sidecar_persisted"] is True
    s.run("backup", str(root / "backups" / "before-import"))
    restored = root / "restored" / "mem.db"
    s.run("restore", str(root / "backups" / "before-import"), "--db", str(restored))
    # The restored copy converted to another model (a few rows: the model is a real one).
    s.run("reembed", CPERSONA_DB_PATH=str(restored), CPERSONA_EMBEDDING_MODE="local-minilm")
    s.run("import", str(root / "notes.jsonl"))
    s.run("index", "rebuild")
    s.run("index", "verify")
    s.run("export", "--embeddings", str(root / "exports" / "by-command.jsonl"))
    s.run("backup", str(root / "backups" / "after-import"))
    s.run("migrate", "--to", str(root / "migrated" / "mem.db"))
    await s.tools([("recall", {"agent_id": "a", "query": "harbour lantern"})])

    made = names(root)
    for name in (
        "data/mem.db",
        "data/mem.db.memories.vec",
        "data/mem.db.memories.vec.sum",
        "data/mem.db.memories.fts",
        "data/mem.db.memories.fts.seg",  # every memory's text, in plain
        "data/mem.db.calibration.json",
        "exports/by-tool.jsonl",
        "exports/by-command.jsonl",
        "backups/after-import/cpersona.db",
        "backups/after-import/manifest.json",
        "restored/mem.db",
        "migrated/mem.db",
    ):
        assert name in made, (name, sorted(made))
    assert any(n.startswith("cache/handshake-") for n in made), sorted(made)
    assert modes_left(root, given) == {}


async def test_a_postgresql_session_leaves_only_private_files(
    tmp_path: Path, usual_umask: None, pg_url: str
):
    """On PostgreSQL the files of this host are the index files in the cache directory, the
    exports and the handshake records; the database's own files are the server's."""
    root = tmp_path / "session"
    root.mkdir()
    s = Session(root, root / "unused.db", pg_url)
    given = {jsonl(root / "notes.jsonl", "a", IMPORTED)}

    await s.tools(conversation(root / "exports" / "by-tool.jsonl"))
    s.handshake()
    s.run("import", str(root / "notes.jsonl"))
    s.run("index", "rebuild")
    s.run("export", str(root / "exports" / "by-command.jsonl"))
    s.run("migrate", "--to", str(root / "migrated" / "mem.db"))
    await s.tools([("recall", {"agent_id": "a", "query": "harbour lantern"})])

    made = names(root)
    assert any(n.endswith("/index.memories.fts.seg") for n in made), sorted(made)
    assert any(n.endswith("/index.memories.vec") for n in made), sorted(made)
    assert any(n.startswith("cache/handshake-") for n in made), sorted(made)
    for name in ("exports/by-tool.jsonl", "exports/by-command.jsonl", "migrated/mem.db"):
        assert name in made, (name, sorted(made))
    assert modes_left(root, given) == {}
