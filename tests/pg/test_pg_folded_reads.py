"""What a PostgreSQL recall reads in fewer round trips answers as the separate statements did.

A recall's scalar reads of its scope (the profile, the newest episode, the capped pool, the
timestamp span) are one statement of scalar subqueries there (storage/search.scope_facts); the
statements every read snapshot asks first (the vector-model record, the snapshot's bounds) go
with its BEGIN (storage/pg/snapshot_reads.py). Both must give what the separate reads give,
and a snapshot must never be answered from an earlier one's reads.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from cpersona.models import ProjectFilter
from cpersona.retrieval.scope_reads import ScopeReads
from cpersona.storage import open_database, vector_models
from cpersona.storage import profiles as profile_sql
from cpersona.storage import search as sql
from cpersona.storage.interface import Store
from cpersona.storage.pg import horizons
from cpersona.storage.pg.db import PgDatabase
from cpersona.storage.search import ScopeSql
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

AGENTS = ("a", "b", "none")
PROJECTS = ("", "p", "q")
CHANNELS = ("", "c")
STAMPS = ("2024-01-0{}T00:00:00+00:00", "not a time {}", "")


@pytest.fixture
def db(pg_url: str) -> Iterator[PgDatabase]:
    """Agent "a": 60 memories, 25 episodes and a profile; "b": 8 memories, 70 episodes, no
    profile; "none": nothing. Some timestamps do not parse, some are empty."""
    database = open_database("", database_url=pg_url, pool_size=3)
    assert isinstance(database, PgDatabase)
    with database.atomic() as conn:
        for agent, memories, episodes in (("a", 60, 25), ("b", 8, 70)):
            for i in range(memories):
                conn.execute(
                    "INSERT INTO memories (agent_id, project_id, channel, content, timestamp) "
                    "VALUES (?, ?, ?, ?, ?)",
                    (agent, PROJECTS[i % 3], CHANNELS[i % 2], f"note {i}", _stamp(i)),
                )
            for i in range(episodes):
                conn.execute(
                    "INSERT INTO episodes (agent_id, project_id, channel, summary, created_at) "
                    "VALUES (?, ?, ?, ?, ?)",
                    (agent, PROJECTS[i % 3], CHANNELS[i % 4 % 2], f"ep {i}", _created(i)),
                )
        profile_sql.upsert(conn, "a", "likes short answers")
    yield database
    database.close()


def _stamp(i: int) -> str:
    return STAMPS[i % 3].format(1 + i % 9)


def _created(i: int) -> str:
    return f"2024-02-{1 + i % 27:02d} 10:00:00" if i % 5 else f"garbled {i}"


def _separately(db: Store, scope: ScopeSql, cap: int) -> sql.ScopeFacts:
    pool = sql.pool_count(db, scope, cap=cap)
    return sql.ScopeFacts(
        profile_sql.get(db, scope.agent_id),
        sql.latest_episode_created(db, scope),
        (pool, sql.timestamp_span(db, scope)),
    )


scopes = st.builds(
    ScopeSql,
    st.sampled_from(AGENTS),
    st.sampled_from([ProjectFilter(None), *(ProjectFilter(p) for p in PROJECTS)]),
    st.sampled_from(CHANNELS),
)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(scope=scopes, cap=st.sampled_from([1, 5, 8, 30, 60, 78, 85, 499]))
def test_one_statement_answers_as_the_separate_reads(
    db: PgDatabase, scope: ScopeSql, cap: int
) -> None:
    with db.snapshot():
        folded = sql.scope_facts(db, scope, profile_sql.GET, cap)
        assert folded == _separately(db, scope, cap)


def test_without_a_cap_the_pool_and_span_are_not_read(db: PgDatabase) -> None:
    scope = ScopeSql("a", ProjectFilter(None), "")
    facts = sql.scope_facts(db, scope, profile_sql.GET, None)
    assert facts.stats is None
    assert facts.profile == "likes short answers"
    assert facts.latest_episode == sql.latest_episode_created(db, scope)


def test_a_snapshot_sees_the_model_record_of_its_own_time(db: PgDatabase) -> None:
    with db.snapshot():  # the first ask: from then on the record goes with each BEGIN
        assert vector_models.read(db)[0] == {}
    with db.atomic() as conn:
        vector_models.record(conn, "memories", "model-one", 8, "stored")
    with db.snapshot():
        first = vector_models.read(db)[0]
        with db.atomic() as conn:  # another writer, inside this snapshot's lifetime
            vector_models.record(conn, "memories", "model-two", 8, "stored")
        assert vector_models.read(db)[0] == first  # the snapshot's own time, both asks
    assert first["memories"].model == "model-one"
    with db.snapshot():
        assert vector_models.read(db)[0]["memories"].model == "model-two"


def test_the_bounds_sent_with_begin_are_the_snapshots(db: PgDatabase) -> None:
    with db.snapshot() as reader:
        horizons.now(reader)  # registers the bounds with BEGIN
    with db.snapshot() as reader:
        sent = horizons.now(reader)
        asked = reader.execute(
            "SELECT pg_snapshot_xmin(pg_current_snapshot())::text, "
            "pg_snapshot_xmax(pg_current_snapshot())::text"
        ).fetchone()
        assert asked is not None
        xmin, xmax = int(asked[0]), int(asked[1])
        assert sent == horizons.encode(xmin, 2 if xmin == xmax else 3)


@pytest.mark.parametrize("agent", AGENTS)
def test_the_scope_read_sent_with_begin_answers_as_the_separate_reads(
    db: PgDatabase, agent: str
) -> None:
    scope = ScopeSql(agent, ProjectFilter(None), "")
    reads = ScopeReads(db, scope, 30)  # made before the snapshot, as recall makes it
    with db.snapshot():
        got = sql.ScopeFacts(reads.profile(), reads.latest_episode_created(), reads.stats(30))
        assert got == _separately(db, scope, 30)
