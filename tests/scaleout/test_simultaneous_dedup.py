"""Two servers storing the same memory at the same moment (issue 19, "How it is checked").

Two HTTP server processes on one PostgreSQL; each round both get a `store` at once, through
the official MCP client: the same msg_id (different content), then the same content (no
msg_id), in one scope per round (the global pool, a project, a project's channel). Writers no
longer share one global lock; the dedup buckets' locks (storage/write_locks.py) must still
give exactly one row, and the other answer `skipped` naming that row's id (not the UNIQUE
index's anonymous `duplicate (unique index)`, which an unlocked probe-then-insert would give).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import psycopg
import pytest
from stress_support import TOKEN, Cluster
from support.http_server import Tools, connect

ROUNDS = 12
SCOPES: list[dict[str, str]] = [{}, {"project_id": "p"}, {"project_id": "p", "channel": "c"}]


async def both_at_once(tools: list[Tools], args: list[dict[str, Any]]) -> list[dict[str, Any]]:
    import json

    answers: list[dict[str, Any]] = [{}, {}]
    ready = anyio.Event()

    async def one(i: int) -> None:
        await ready.wait()
        result = await tools[i].raw("store", args[i])
        answers[i] = json.loads(result.content[0].text)

    async with anyio.create_task_group() as group:
        group.start_soon(one, 0)
        group.start_soon(one, 1)
        await anyio.sleep(0)
        ready.set()
    return answers


def rows(url: str, agent: str) -> list[tuple[int, str, str]]:
    with psycopg.connect(url) as conn:
        found = conn.execute(
            "SELECT id, msg_id, content FROM memories WHERE agent_id = %s ORDER BY id", (agent,)
        ).fetchall()
    return [(int(r[0]), str(r[1]), str(r[2])) for r in found]


def one_stored_one_skipped(answers: list[dict[str, Any]], reason: str) -> int:
    stored = [a for a in answers if a.get("result") == "stored"]
    skipped = [a for a in answers if a.get("result") == "skipped"]
    assert len(stored) == 1 and len(skipped) == 1, answers
    assert skipped[0]["reason"] == reason and skipped[0].get("id") == stored[0]["id"], answers
    return int(stored[0]["id"])


@pytest.mark.slow
def test_two_servers_store_one_msg_id_and_one_content_at_once(pg_url: str, tmp_path: Path) -> None:
    cluster = Cluster.make(pg_url, tmp_path, stdio=0, http=2)
    kept: dict[str, set[int]] = {}

    async def main() -> None:
        with anyio.fail_after(300):
            await rounds()

    async def rounds() -> None:
        first, second = (s.url for s in cluster.http_servers)
        async with connect(first, TOKEN) as one, connect(second, TOKEN) as two:
            for r in range(ROUNDS):
                scope = SCOPES[r % len(SCOPES)]
                agent = f"agent-{r}"
                same_id = [
                    {"agent_id": agent, "message": {"id": "m", "content": f"text {i}"}, **scope}
                    for i in range(2)
                ]
                by_id = one_stored_one_skipped(
                    await both_at_once([one, two], same_id), "duplicate msg_id"
                )
                same_text = {"agent_id": agent, "message": {"content": "same text"}, **scope}
                by_text = one_stored_one_skipped(
                    await both_at_once([one, two], [same_text, same_text]), "duplicate content"
                )
                kept[agent] = {by_id, by_text}

    cluster.start_http()
    try:
        anyio.run(main)
    finally:
        cluster.stop_http()
    for agent, ids in kept.items():
        found = rows(pg_url, agent)
        assert {row[0] for row in found} == ids, found  # exactly one row per rule
        assert sorted(row[1] for row in found) == ["", "m"]
