"""A directory where an index file or its lock file belongs (issue 11).

An empty directory is nobody's data: the next use removes it and rebuilds the file, so `index
verify` succeeds. A directory with contents is not cpersona's to delete: the command line
says which path, what is wrong and what to do (exit 1, no traceback), and succeeds once it is
moved away. The server never fails a call over it: writes are acknowledged as written, recall
reads SQLite, and the index catches up once the path is clear.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cpersona.server.app import build_server
from mcp import Client
from support.commands import index_command
from vecindex_support import new_engine

WHERE = {"index": "", "lock": ".lock"}


def obstruct(path: Path, *, contents: bool) -> None:
    path.unlink(missing_ok=True)
    path.mkdir()
    if contents:
        (path / "keep.txt").write_text("someone's file")


def index_path(db: Path, table: str, where: str) -> Path:
    return Path(f"{db}.{table}.vec{WHERE[where]}")


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "m.db"
    engine = new_engine(path)
    for i in range(6):
        out = engine.writer.store("a", {"content": f"note {i} about lanterns"}, "", "")
        assert out["result"] == "stored"
    engine.close()
    return path


#: `cpersona index verify` covers the vector and the full-text index of both tables.
ALL_OK = "memories: OK\nepisodes: OK\nmemories full-text: OK\nepisodes full-text: OK\n"


@pytest.mark.parametrize("where", sorted(WHERE))
def test_vecindex_obstruction_empty_directory_is_repaired(db: Path, where: str) -> None:
    for table in ("memories", "episodes"):
        obstruct(index_path(db, table, where), contents=False)
    r = index_command(db, "verify")
    assert (r.returncode, r.stdout) == (0, ALL_OK), r.stderr
    for table in ("memories", "episodes"):
        assert index_path(db, table, where).is_file()


@pytest.mark.parametrize("where", sorted(WHERE))
def test_vecindex_obstruction_directory_with_contents_is_named(db: Path, where: str) -> None:
    blocked = index_path(db, "memories", where)
    obstruct(blocked, contents=True)
    for action in ("verify", "rebuild"):
        r = index_command(db, action)
        assert r.returncode == 1, (r.stdout, r.stderr)
        assert "Traceback" not in r.stderr, r.stderr
        assert (
            f"memories: {action} failed: {blocked} is a directory with contents, where "
            "cpersona's index keeps a file; cpersona does not delete it: move it away"
        ) in r.stdout
        assert "episodes: " in r.stdout  # the other table is still served
    assert (blocked / "keep.txt").read_text() == "someone's file"
    blocked.rename(blocked.with_name("moved-away"))
    r = index_command(db, "verify")
    assert (r.returncode, r.stdout) == (0, ALL_OK), r.stderr


@pytest.mark.anyio
@pytest.mark.parametrize("where", sorted(WHERE))
async def test_vecindex_obstruction_server_keeps_serving(db: Path, where: str) -> None:
    blocked = index_path(db, "memories", where)
    obstruct(blocked, contents=True)
    export = db.with_name("in.jsonl")
    export.write_text(
        json.dumps({"_type": "memory", "agent_id": "a", "content": "imported lantern"}) + "\n"
    )
    engine = new_engine(db)
    try:
        async with Client(build_server(engine), raise_exceptions=True) as client:

            async def call(name: str, args: dict[str, object]) -> dict[str, object]:
                result = await client.call_tool(name, args)
                return json.loads(result.content[0].text)

            stored = await call("store", {"agent_id": "a", "message": {"content": "new lantern"}})
            assert stored["result"] == "stored", stored
            imported = await call("import_memories", {"input_path": str(export)})
            assert imported.get("ok") is True and imported["imported_memories"] == 1, imported
            recalled = await call("recall", {"agent_id": "a", "query": "lantern", "limit": 20})
            contents = {m["content"] for m in recalled["messages"]}
            assert {"new lantern", "imported lantern"} <= contents, recalled
            blocked.rename(blocked.with_name("moved-away"))
            await call("store", {"agent_id": "a", "message": {"content": "later lantern"}})
    finally:
        engine.close()
    assert (blocked.with_name("moved-away") / "keep.txt").exists()
    r = index_command(db, "verify")
    assert (r.returncode, r.stdout) == (0, ALL_OK), r.stderr
