"""Write tools' locks on PostgreSQL (issue 19): scoped to what they protect, seen in pg_locks.

Two database objects stand for two servers. A transaction is held open with the locks a store
takes (storage/write_locks.py) while another one starts: writes to unrelated buckets hold
their locks at the same time; writes whose dedup probes overlap wait, which pg_locks shows as
an advisory lock not granted. No timing is asserted: the waits are bounded only so that a
broken lock fails instead of hanging.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import psycopg
import pytest
from cpersona.models import NewMemory
from cpersona.storage import open_database, writes
from cpersona.storage import write_locks as locks
from cpersona.storage.pg.db import PgDatabase

GUARD = 60.0  # seconds before a wait that should end is called a hang


@pytest.fixture
def servers(pg_url: str) -> Iterator[tuple[PgDatabase, PgDatabase]]:
    one = open_database("", database_url=pg_url, pool_size=2)
    two = open_database("", database_url=pg_url, pool_size=2)
    yield one, two  # type: ignore[misc]
    one.close()
    two.close()


def advisory(pg_url: str) -> list[tuple[int, str, bool]]:
    """(pid, mode, granted) of every advisory lock taken on the databases' keys."""
    with psycopg.connect(pg_url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pid, mode, granted FROM pg_locks WHERE locktype = 'advisory' "
            "AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
        ).fetchall()
    return [(int(r[0]), str(r[1]), bool(r[2])) for r in rows]


class Holder(threading.Thread):
    """A write transaction holding a store's locks into (agent, project, channel) until told."""

    def __init__(
        self, db: PgDatabase, agent: str, project: str = "", channel: str = "", msg_id: str = ""
    ) -> None:
        super().__init__(daemon=True)
        self.db, self.keys = db, locks.store_keys(agent, project, channel, msg_id)
        self.inside, self.release = threading.Event(), threading.Event()

    def run(self) -> None:
        with self.db.atomic(exclusive=False) as conn:
            locks.take(conn, self.keys)
            self.inside.set()
            self.release.wait(GUARD)


def wait_for(check) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + GUARD
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.02)
    return False


def test_writers_on_different_agents_hold_their_locks_at_once(
    pg_url: str, servers: tuple[PgDatabase, PgDatabase]
) -> None:
    one, two = servers
    a, b = Holder(one, "agent-a", "p", "c", "m1"), Holder(two, "agent-b", "p", "c", "m1")
    a.start()
    assert a.inside.wait(GUARD)
    b.start()
    assert b.inside.wait(GUARD)  # got in while `a` holds its transaction open
    held = advisory(pg_url)
    exclusive = {pid for pid, mode, granted in held if granted and mode == "ExclusiveLock"}
    assert len(exclusive) == 2 and all(granted for _, _, granted in held)
    a.release.set()
    b.release.set()
    a.join(GUARD)
    b.join(GUARD)


@pytest.mark.parametrize(
    ("first", "second", "conflict"),
    [
        (("", "c1", "m1"), ("", "c2", "m1"), True),  # one msg_id: its probe ignores the channel
        (("p", "c"), ("p", "c"), True),  # one bucket
        (("", ""), ("p", "c"), True),  # a bucket write probes the global pool
        (("p", "c"), ("", ""), True),  # ... so a global write waits for it, too
        (("p", ""), ("p", "c"), True),  # a channel write probes the project's channel ''
        (("p1", "c"), ("p2", "c"), False),  # sibling projects: neither probes the other
        (("", "c1"), ("", "c2"), False),  # sibling channels of the global pool
        (("p", "c"), ("", "d"), False),  # ('', d) is in neither probe
    ],
    ids=str,
)
def test_only_writes_whose_probes_overlap_wait(
    pg_url: str,
    servers: tuple[PgDatabase, PgDatabase],
    first: tuple[str, str],
    second: tuple[str, str],
    conflict: bool,
) -> None:
    one, two = servers
    a, b = Holder(one, "agent", *first), Holder(two, "agent", *second)
    a.start()
    assert a.inside.wait(GUARD)
    b.start()
    if conflict:
        assert wait_for(lambda: any(not g for _, _, g in advisory(pg_url)))
        assert not b.inside.is_set()
        a.release.set()
        assert b.inside.wait(GUARD)  # and gets in once `a` commits
    else:
        assert b.inside.wait(GUARD)
    a.release.set()
    b.release.set()
    a.join(GUARD)
    b.join(GUARD)


def memory(agent: str, content: str, msg_id: str = "", project: str = "") -> NewMemory:
    return NewMemory(
        agent_id=agent,
        project_id=project,
        msg_id=msg_id,
        content=content,
        source="test",
        timestamp="2026-01-01T00:00:00+00:00",
        metadata="{}",
        channel="",
        embedding=None,
    )


def test_a_store_waiting_on_a_bucket_finds_the_row_and_skips_with_its_id(
    servers: tuple[PgDatabase, PgDatabase],
) -> None:
    """Server one stores while server two's store of the same msg_id waits on the bucket
    lock: once one commits, two's probe sees the row and answers the duplicate's id."""
    one, two = servers
    result: list[writes.Stored] = []

    def store_two() -> None:
        result.append(writes.store_memory(two, memory("agent", "other text", "m1"), None))

    with one.atomic(exclusive=False) as conn:
        locks.take(conn, locks.store_keys("agent", "", "", "m1"))
        first = writes.store_memory(one, memory("agent", "first text", "m1"), None)
        thread = threading.Thread(target=store_two, daemon=True)
        thread.start()
        assert wait_for(lambda: any(not g for _, _, g in advisory(one.url)))
    thread.join(GUARD)
    assert first.id is not None and first.duplicate is None
    assert result and result[0].duplicate is not None
    assert (result[0].duplicate.reason, result[0].duplicate.id) == ("duplicate msg_id", first.id)
