"""Four server processes on one database: two stdio, two HTTP (issue 12, "How it is checked").

Eight clients of the official MCP client, two per server, 500 mixed calls each (store with and
without msg_id, duplicates on purpose across servers, update, delete, lock / unlock, refused
writes to locked and foreign rows, recall in every scope): no error, no acknowledged write
lost, no row a dedup rule forbids, every recalled row in the caller's scope. Then a second
phase on the same database in which one HTTP server is SIGKILLed mid-run: its clients fail
over to the other HTTP server and resend the call in flight, everyone else goes on, and
nothing acknowledged is lost. Parametrised over the backend: SQLite (several processes on one
file, the one-host deployment) and PostgreSQL.

Counts only, never timings: `benches/stress.py` runs larger configurations and times them.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from stress_support import Book, Cluster, Workload, check, cross_reads, make_lanes, run_phase

CLIENTS = 8
PAIRS = CLIENTS // 2  # two clients per agent, on different servers
CALLS = 500
KILL_PHASE_CALLS = 120
KILL_AFTER = 250  # answers into the second phase


@pytest.fixture(params=["sqlite", "postgresql"])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """One database every server of the test opens: a file path or a PostgreSQL URL."""
    if request.param == "postgresql":
        return request.getfixturevalue("pg_url")
    return str(tmp_path / "shared.db")


@pytest.mark.slow
def test_four_servers_one_database_then_one_is_killed(database: str, tmp_path: Path) -> None:
    cluster = Cluster.make(database, tmp_path, stdio=2, http=2)
    book = Book()
    work = Workload(book)
    victim = cluster.http_servers[1]

    async def phases() -> tuple[dict[str, int], dict[str, object]]:
        first = make_lanes(cluster, CLIENTS, "p1", seed=12, pairs=PAIRS)
        await run_phase(cluster, work, first, CALLS)
        after_first = dict(book.outcomes)
        second = make_lanes(cluster, CLIENTS, "p2", seed=12, pairs=PAIRS)
        on_victim = [lane.client for lane in second if lane.server is victim]
        await run_phase(cluster, work, second, KILL_PHASE_CALLS, (victim, KILL_AFTER))
        moved = {lane.client: lane.server.name for lane in second}
        crossed = await cross_reads(cluster, book)
        return after_first, {"on_victim": on_victim, "moved": moved, "crossed": crossed}

    async def main() -> tuple[dict[str, int], dict[str, object]]:
        with anyio.fail_after(600):
            async with cluster.stdio_sessions():
                return await phases()

    cluster.start_http()
    try:
        after_first, second = anyio.run(main)
    finally:
        codes = cluster.stop_http()
    logs = cluster.stderr()
    agents = {f"agent-{i}" for i in range(PAIRS)}

    assert book.errors == []
    assert check(book, database, agents) == []
    assert second["crossed"] == []
    # Every call of both phases was answered (the resent ones once, after the failover).
    assert book.acknowledged == CLIENTS * (CALLS + KILL_PHASE_CALLS)
    # The workload reached every path the checks are about.
    for outcome in ("stored", "skipped: duplicate msg_id", "skipped: duplicate content",
                    "updated", "deleted", "locked", "unlocked", "recalled", "foreign refused",
                    "update of a locked row refused"):  # fmt: skip
        assert after_first.get(outcome, 0) > 0, (outcome, after_first)
    # The kill happened mid-run: the victim's clients moved to the survivor and went on.
    assert victim.killed and codes[victim.name] is None
    assert second["on_victim"] and book.failovers >= len(second["on_victim"])
    for client in second["on_victim"]:
        assert second["moved"][client] == cluster.http_servers[0].name
    assert codes[cluster.http_servers[0].name] == 0
    for name, text in logs.items():
        assert "Traceback" not in text, (name, text[-3000:])
