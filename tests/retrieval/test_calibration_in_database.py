"""The calibration kept in the database (`DatabaseSidecar`, docs/scale-out.md): what servers on
many hosts sharing one PostgreSQL use instead of a file beside a database they do not have.

The class speaks only through storage/meta.py, so its merge and backup rules are checked here
on a SQLite database; the same rules as the file's (tests/retrieval/test_calibration_sidecar.py):
entries another process wrote are carried forward, the entries a process owns are overwritten
or deleted, one backup per label and the newest five are kept.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from calibration_support import NEWEST_FIVE, back_up_seven_then_v6_again
from cpersona.config import Settings
from cpersona.embedding.hashing import HashingProvider
from cpersona.engine import Engine
from cpersona.retrieval.sidecar import DatabaseSidecar, Payload
from cpersona.storage import Database, open_database
from cpersona.storage import meta as meta_sql


@pytest.fixture
def db(tmp_path: Path):
    database = open_database(str(tmp_path / "mem.db"))
    yield database
    database.close()


def test_two_processes_merge_their_entries(db: Database) -> None:
    a, b = DatabaseSidecar(db), DatabaseSidecar(db)  # two servers on one database
    assert a.load().state == "missing"
    assert a.write(
        Payload(embedding_dim=384, agent_thresholds={"a": 0.41}), {("agent_thresholds", "a")}
    )
    assert b.write(
        Payload(embedding_dim=384, agent_thresholds={"b": 0.52}), {("agent_thresholds", "b")}
    )
    loaded = a.load()
    assert loaded.state == "ok" and loaded.payload is not None
    assert loaded.payload.agent_thresholds == {"a": 0.41, "b": 0.52}  # b carried a forward
    # A owns "a" and no longer has it (delete_agent_data): gone; b's entry stays.
    assert a.write(Payload(embedding_dim=384), {("agent_thresholds", "a")})
    assert b.load().payload.agent_thresholds == {"b": 0.52}
    # A payload measured at another width carries nothing of the stored one.
    assert a.write(Payload(embedding_dim=768, global_threshold=0.3), {("global_threshold", "")})
    stored = b.load().payload
    assert stored.embedding_dim == 768 and stored.agent_thresholds == {}
    assert stored.global_threshold == 0.3


def test_unreadable_content_is_reported_not_restored(db: Database) -> None:
    with meta_sql.edit(db) as entries:
        entries.put(DatabaseSidecar.KEY, b"{not json")
    assert DatabaseSidecar(db).load().state == "unreadable"
    with meta_sql.edit(db) as entries:
        entries.put(DatabaseSidecar.KEY, b"\xff\xfe")
    assert DatabaseSidecar(db).load().state == "unreadable"


def test_backups_keep_one_per_label_and_the_newest_five(db: Database) -> None:
    car = DatabaseSidecar(db)
    assert car.backup("v0") is None  # nothing stored, nothing to back up
    car.write(Payload(embedding_dim=384, global_threshold=0.35), {("global_threshold", "")})
    key = back_up_seven_then_v6_again(car)
    assert key == "calibration.before-v6-20240101-000100"
    assert sorted((label, stamp) for _, label, stamp in car.backups()) == NEWEST_FIVE
    assert meta_sql.read(db).get(key) == meta_sql.read(db).get(DatabaseSidecar.KEY)


def test_servers_on_postgresql_share_one_calibration(pg_url: str, tmp_path: Path) -> None:
    """Two servers on one PostgreSQL: each calibrates an agent, both values land in the
    database (merged), none in a file; a server started afterwards restores both."""
    settings = Settings(
        db_path=str(tmp_path / "unused.db"), database_url=pg_url, embedding_mode="hashing"
    )
    first = Engine(settings, embedder=HashingProvider())
    second = Engine(settings, embedder=HashingProvider())
    try:
        for i, word in enumerate(("tomato", "basil", "compost", "oven", "flour", "crust") * 3):
            for agent in ("a", "b"):
                first.writer.store(agent, {"content": f"{agent} {i}: {word} day {i}"}, "", "")
        got_a = first.calibrator.calibrate("a")
        got_b = second.calibrator.calibrate("b")
        assert got_a["sidecar_persisted"] and got_b["sidecar_persisted"]
    finally:
        first.close()
        second.close()
    assert list(tmp_path.iterdir()) == []  # nothing beside a database file nobody uses
    third = Engine(settings, embedder=HashingProvider())
    try:
        third.calibrator.startup()
        thresholds = third.thresholds.agent_thresholds
        assert thresholds == {"a": got_a["new_threshold"], "b": got_b["new_threshold"]}
    finally:
        third.close()
