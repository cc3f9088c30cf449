"""A store cpersona wrote declarations into opens in CPersona 2.6.14 (pip-installed in a test
venv), whose own `traverse` and record-link reader see them, answering as cpersona answers; and
the store 2.6.14 has then upgraded still serves them here (issue 32).

The venv: `CPERSONA_TEST_UPSTREAM_PYTHON` names its interpreter when one is already made;
otherwise one is created for the session and `cpersona==2.6.14` installed from the package
index (skipped where that cannot be done: no network, no index).
"""

from __future__ import annotations

import json
import os
import subprocess
import venv
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.anyio

UPSTREAM = "cpersona==2.6.14"
#: Runs inside the 2.6.14 venv: its own schema migration, traverse and record links.
READER = """
import asyncio, json, os, sys
from cpersona import associations, database

async def main():
    await database.init_db()
    args = json.loads(sys.argv[1])
    out = {
        "traverse": await associations.traverse(
            args["agent"], args["entity"], max_hops=args["max_hops"]
        ),
        "links": await associations.record_links(args["agent"], args["refs"]),
    }
    print(json.dumps(out), flush=True)

asyncio.run(main())
os._exit(0)  # 2.6.14 leaves its aiosqlite threads running: exit without joining them
"""


@pytest.fixture(scope="session")
def upstream_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    given = os.environ.get("CPERSONA_TEST_UPSTREAM_PYTHON")
    if given:
        return Path(given)
    root = tmp_path_factory.mktemp("upstream-venv")
    venv.EnvBuilder(with_pip=True).create(root)
    python = root / "bin" / "python"
    done = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", UPSTREAM],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if done.returncode != 0:
        pytest.skip(f"could not install {UPSTREAM}: {done.stderr.strip()[-300:]}")
    return python


def read_upstream(python: Path, db: Path, args: dict[str, Any]) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # not our package
    env["CPERSONA_DB_PATH"] = str(db)
    done = subprocess.run(
        [str(python), "-c", READER, json.dumps(args)],
        capture_output=True,
        text=True,
        env=env,
        cwd=db.parent,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    answer: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return answer


@pytest.mark.parametrize("store_backend", ["sqlite"])  # 2.6.14 reads SQLite files only
async def test_declarations_written_here_are_read_by_2_6_14(
    connect: Any, tmp_path: Path, upstream_python: Path
) -> None:
    db = tmp_path / "memory.db"
    async with connect(db_path=str(db)) as tools:
        old = await tools(
            "store", {"agent_id": "alice", "message": {"content": "Alice lives in Paris"}}
        )
        new = await tools(
            "store",
            {
                "agent_id": "alice",
                "message": {"content": "Alice moved to Berlin"},
                "associations": {
                    "entities": [{"name": "Alice", "aliases": ["Al"]}, {"name": "Berlin"}],
                    "relations": [
                        {"subject": "Alice", "predicate": "Lives In", "object": "Berlin"}
                    ],
                },
            },
        )
        relation = {
            "subject": f"mem:{new['id']}",
            "predicate": "supersedes",
            "object": f"mem:{old['id']}",
        }
        await tools(
            "declare_associations", {"agent_id": "alice", "associations": {"relations": [relation]}}
        )
        ours = await tools("traverse", {"agent_id": "alice", "entity": "al", "max_hops": 1})
    refs = [f"mem:{old['id']}", f"mem:{new['id']}"]
    theirs = read_upstream(
        upstream_python, db, {"agent": "alice", "entity": "al", "max_hops": 1, "refs": refs}
    )
    assert theirs["traverse"] == ours
    assert [e["name"] for e in ours["entities"]] == ["Alice", "Berlin"]
    assert theirs["links"] == [[f"mem:{new['id']}", "supersedes", f"mem:{old['id']}"]]
    # 2.6.14 has now migrated the file to its schema: cpersona still serves the declarations.
    async with connect(db_path=str(db)) as tools:
        again = await tools("traverse", {"agent_id": "alice", "entity": "al", "max_hops": 1})
        recalled = await tools("recall", {"agent_id": "alice", "query": "Where does Alice live?"})
    assert again == ours
    assert f"mem:{old['id']}" not in [m.get("ref") for m in recalled["messages"]]
