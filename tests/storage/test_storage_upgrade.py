"""A database made by the current release upgrades in place when the new code starts on it,
on both backends (issue 18 item 3): every row of every table kept field by field, ids
continuing, and the read tools answering what the release answered (tests/fixtures/)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from pg_support import drop_database, empty_database
from storage_helpers import mcp_tools
from upgrade_support import (
    READS,
    copy_release_db,
    load_release_pg,
    lost_rows,
    pg_rows,
    release_answers,
    sqlite_rows,
)

pytestmark = pytest.mark.anyio


class Release:
    """The release's database on the test's backend, and every row of it read past cpersona."""

    def __init__(self, store_backend: str, path: Path, url: str | None) -> None:
        self.store_backend, self.path, self.url = store_backend, path, url

    def rows(self) -> dict[str, list[dict[str, object]]]:
        return pg_rows(self.url) if self.url else sqlite_rows(self.path)

    def settings(self) -> dict[str, object]:
        return {"database_url": self.url} if self.url else {}


@pytest.fixture
def release(store_backend: str, tmp_path: Path) -> Iterator[Release]:
    path = copy_release_db(tmp_path / "release.db")
    if store_backend == "sqlite":
        yield Release(store_backend, path, None)
        return
    url = empty_database()
    try:
        load_release_pg(url)
        yield Release(store_backend, path, url)
    finally:
        drop_database(url)


async def test_the_upgrade_keeps_every_row_and_the_answers(release, make_engine):
    before = release.rows()
    assert len(before["memories"]) == 8 and len(before["pending_memory_tasks"]) == 1
    engine = make_engine(db_path=str(release.path), **release.settings())
    async with mcp_tools(engine) as call:
        answers = [await call(name, args) for name, args in READS]
    engine.close()
    assert answers == release_answers(release.store_backend)
    upgraded = release.rows()
    assert lost_rows(before, upgraded) == {}
    # Starting again on the upgraded database changes nothing.
    make_engine(db_path=str(release.path), **release.settings()).close()
    assert lost_rows(upgraded, release.rows()) == {}
    assert lost_rows(release.rows(), upgraded) == {}


async def test_after_the_upgrade_ids_continue_and_locks_hold(release, make_engine):
    engine = make_engine(db_path=str(release.path), **release.settings())
    async with mcp_tools(engine) as call:
        # The release handed out memory ids 1-10 (10 deleted) and episode ids 1-3 (3 deleted).
        stored = await call("store", {"agent_id": "alice", "message": {"content": "Oolong too"}})
        assert (stored["result"], stored["id"]) == ("stored", 11)
        episode = await call("archive_episode", {"agent_id": "alice", "summary": "Tea talk"})
        assert episode["episode_id"] == 4
        again = await call("store", {"agent_id": "bob", "message": {"id": "b-2", "content": "x"}})
        assert (again["result"], again["id"]) == ("skipped", 8)
        refused = await call("update_memory", {"memory_id": 1, "content": "changed"})
        assert refused["ok"] is False
        found = await call("recall", {"agent_id": "alice", "query": "green tea every morning"})
        assert found["messages"][0]["content"] == "Alice drinks green tea every morning"
        profile = await call("get_profile", {"agent_id": "bob"})
        assert profile == {"profile": "Bob: Redis, nightly backups."}
