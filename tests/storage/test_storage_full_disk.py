"""A full disk under the database (issue 11): clear answers, nothing acknowledged that was not
written, nothing corrupted, and everything works again once space is freed.

`full_disk.small_disk` mounts a small tmpfs where the machine allows it (root, as in CI) and
simulates a full disk otherwise; every step below runs in both. `store` and `import_memories`
go through the official MCP client; the index through recall, the server's own syncs and
`cpersona index rebuild|verify`. Loops are bounded by counts; nothing asserts on time.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from cpersona.config import Settings
from cpersona.embedding.hashing import HashingProvider
from cpersona.engine import Engine
from cpersona.server.app import build_server
from cpersona.storage.db import DISK_FULL
from cpersona.vectors.index import VectorIndex
from full_disk import Disk, small_disk
from mcp import Client
from support.commands import index_command

IMPORTED = 200


@pytest.fixture(params=["tmpfs", "simulated"])
def disk(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Disk]:
    """A real small tmpfs where it can be mounted (root: CI), else the simulation; and the
    simulation always, so both paths stay tested."""
    with small_disk(tmp_path, simulate=request.param == "simulated") as mounted:
        yield mounted


def new_engine(db: Path) -> Engine:
    return Engine(Settings(db_path=str(db), embedding_mode="hashing"), embedder=HashingProvider())


def rows(db: Path) -> dict[int, str]:
    with closing(sqlite3.connect(db)) as conn:
        return dict(conn.execute("SELECT id, content FROM memories").fetchall())


def integrity(db: Path) -> str:
    with closing(sqlite3.connect(db)) as conn:
        return str(conn.execute("PRAGMA integrity_check").fetchone()[0])


def import_file(path: Path) -> Path:
    records = (
        {"_type": "memory", "agent_id": "b", "content": f"imported {i} " + "y" * 400}
        for i in range(IMPORTED)
    )
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


class Calls:
    def __init__(self, client: Client) -> None:
        self.client = client

    async def __call__(self, name: str, args: dict[str, Any]) -> dict[str, Any]:
        result = await self.client.call_tool(name, args)
        return json.loads(result.content[0].text)

    async def store(self, content: str) -> dict[str, Any]:
        return await self("store", {"agent_id": "a", "message": {"content": content}})


@pytest.mark.anyio
async def test_full_disk_store_and_import_answer_clearly_and_recover(disk: Disk, tmp_path: Path):
    db = disk.path / "m.db"
    source = import_file(tmp_path / "in.jsonl")  # read from another filesystem
    acknowledged: dict[int, str] = {}
    engine = new_engine(db)
    try:
        async with Client(build_server(engine), raise_exceptions=True) as client:
            call = Calls(client)
            for i in range(10):
                out = await call.store(f"lantern note {i}")
                acknowledged[out["id"]] = f"lantern note {i}"
            disk.fill(engine)
            refused = 0
            for i in range(30):
                content = f"lantern while full {i} " + "x" * 3000
                out = await call.store(content)
                if out.get("result") == "stored":
                    acknowledged[out["id"]] = content
                else:
                    assert out == {"ok": False, "result": "rejected", "reason": DISK_FULL}
                    refused += 1
            assert refused > 0
            out = await call("import_memories", {"input_path": str(source)})
            assert out["ok"] is False, out
            assert out["error"] == f"import aborted and rolled back: {DISK_FULL}"
            assert out["imported_memories"] == 0
            recalled = await call("recall", {"agent_id": "a", "query": "lantern note"})
            assert recalled["messages"], recalled
            assert integrity(db) == "ok"
            assert rows(db) == acknowledged  # all acknowledged, nothing else (no import row)

            disk.free(engine)
            out = await call.store("lantern after the disk was freed")
            assert out["result"] == "stored", out
            acknowledged[out["id"]] = "lantern after the disk was freed"
            out = await call("import_memories", {"input_path": str(source)})
            assert out["ok"] is True and out["imported_memories"] == IMPORTED, out
    finally:
        engine.close()
    assert integrity(db) == "ok"
    stored = rows(db)
    assert {k: stored[k] for k in acknowledged} == acknowledged
    assert len(stored) == len(acknowledged) + IMPORTED
    for table in ("memories", "episodes"):
        check = new_engine(db)
        try:
            assert VectorIndex(check.db, table).verify() == []
        finally:
            check.close()


def rebuild(disk: Disk, db: Path) -> tuple[int, str]:
    """`cpersona index rebuild` on a real mount; the same call in process when simulated."""
    if disk.real:
        done = index_command(db, "rebuild", "--table", "memories")
        assert "Traceback" not in done.stderr, done.stderr
        return done.returncode, done.stdout
    engine = new_engine(db)
    try:
        VectorIndex(engine.db, "memories").rebuild()
    except OSError as exc:
        return 1, f"memories: rebuild failed: {exc.strerror}"
    finally:
        engine.close()
    return 0, "memories: rebuilt"


@pytest.mark.anyio
async def test_full_disk_index_sync_and_rebuild(disk: Disk):
    db = disk.path / "m.db"
    vec = Path(f"{db}.memories.vec")
    engine = new_engine(db)  # a running server: the operator rebuilds beside it
    try:
        for i in range(30):
            out = engine.writer.store("a", {"content": f"lantern {i}"}, "", "")
            assert out["result"] == "stored"
        before = vec.read_bytes()
        query = {"agent_id": "a", "query": "lantern", "limit": 50}
        async with Client(build_server(engine), raise_exceptions=True) as client:
            expected = [m["ref"] for m in (await Calls(client)("recall", query))["messages"]]
        assert len(expected) >= 20
        disk.fill(engine)
        code, out = rebuild(disk, db)
        assert code == 1 and "memories: rebuild failed: No space left on device" in out, out
        assert vec.read_bytes() == before  # the old file is untouched
        assert sorted(p.name for p in disk.path.glob("*.tmp*")) == []  # no temporary holds space

        vec.unlink()  # the index lost while the disk is full: the server must still serve
        async with Client(build_server(engine), raise_exceptions=True) as client:
            call = Calls(client)
            recalled = await call("recall", query)  # the same answer, read from SQLite
            assert [m["ref"] for m in recalled["messages"]] == expected, recalled
            out = await call.store("lantern written while the index cannot be")
            # SQLite may still have room in pages it owns; either answer is a truthful one.
            assert out.get("result") == "stored" or out.get("reason") == DISK_FULL, out
            written = out.get("result") == "stored"
        assert not vec.exists()
        assert integrity(db) == "ok"
    finally:
        engine.close()
    if disk.real:
        # Closed cleanly, the database has no -shm / -wal left, and opening must create them:
        # with the space the close released taken too, it cannot be opened at all.
        disk.free()
        disk.fill()
        done = index_command(db, "rebuild")
        assert done.returncode == 2, (done.stdout, done.stderr)
        assert "the disk holding the database is full: free space and try again" in done.stderr

    disk.free()
    code, out = rebuild(disk, db)
    assert code == 0, out
    engine = new_engine(db)
    try:
        assert integrity(db) == "ok"
        assert VectorIndex(engine.db, "memories").verify() == []
        assert VectorIndex(engine.db, "memories").status().live == 30 + written
    finally:
        engine.close()


_SPARSE = """
import os, sys
from cpersona.vectors import format as vector_format
vector_format._allocate = lambda fd, length: os.ftruncate(fd, length)  # as before issue 11
vector_format.VectorFileWriter.create(sys.argv[1], 384, 2000, bytes(16), 0).close()
"""
_APPEND = """
import sys
import numpy as np
from cpersona.vectors.format import VectorFileWriter
try:
    writer = VectorFileWriter(sys.argv[1])
    for i in range(2000):
        writer.append(i, i, agent=1, project=1, channel=1, source=0,
                      vector=np.ones(384, dtype=np.float32))
except OSError as exc:
    print(f"refused: {exc.strerror}")
"""


def test_full_disk_sparse_index_file_of_an_earlier_version(tmp_path: Path):
    """An index file sized sparse (as before this fix) gets its blocks reserved when opened:
    writing through the mapping into a hole on a full disk would kill the process (SIGBUS)."""
    with small_disk(tmp_path) as disk:
        if not disk.real:
            pytest.skip("a simulated disk cannot raise SIGBUS: needs a tmpfs mount (root, CI)")
        path = str(disk.path / "old.vec")
        run = [sys.executable, "-c"]
        subprocess.run([*run, _SPARSE, path], check=True, timeout=120)
        disk.fill()
        done = subprocess.run([*run, _APPEND, path], capture_output=True, text=True, timeout=120)
        assert (done.returncode, done.stdout) == (0, "refused: No space left on device\n"), done


def _start(db: Path, *command: str) -> subprocess.CompletedProcess[str]:
    """`python -m <command>` on `db` with an empty stdin (a stdio server then exits at EOF)."""
    return subprocess.run(
        [sys.executable, "-m", *command],
        env={**os.environ, "CPERSONA_DB_PATH": str(db), "CPERSONA_EMBEDDING_MODE": "hashing"},
        input="",
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_full_disk_at_start_says_the_disk_is_full(tmp_path: Path):
    """A cleanly closed database on a full disk: the server and `cpersona checkup` say the
    disk is full (SQLite's own message is only "disk I/O error"), and both work once space
    is freed."""
    with small_disk(tmp_path) as disk:
        if not disk.real:
            pytest.skip("the start fails only on a real full filesystem: needs a tmpfs mount")
        db = disk.path / "m.db"
        engine = new_engine(db)
        engine.writer.store("a", {"content": "kept across the full disk"}, "", "")
        engine.close()  # a clean close removes -wal and -shm, which the next open must create
        assert not Path(f"{db}-wal").exists()
        disk.fill()
        server = _start(db, "cpersona")
        checkup = _start(db, "cpersona.checkup")
        disk.free()
        after = _start(db, "cpersona.checkup")
    full = "the disk holding the database is full: free space and try again"
    assert server.returncode != 0 and "Traceback" not in server.stderr, server.stderr
    failure = [line for line in server.stderr.splitlines() if "cannot open" in line]
    assert len(failure) == 1 and full in failure[0], server.stderr
    assert checkup.returncode == 3 and full in checkup.stderr, checkup.stderr
    assert after.returncode == 0, after.stderr + after.stdout
