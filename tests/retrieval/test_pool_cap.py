"""Recall counts the pool only up to the size past which the gate cannot tell pools apart.

N_pool (retrieval.md §7.1) feeds the gate through m(N), which reaches its floor at N = 499,
and the thresholds 50 (profile) and 100 (unscored); recall asks for min(N, 499) so that a
1,000,000-row agent is not counted in full (docs/notes/performance-notes.md, "1,000,000 memories").
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from cpersona.models import ProjectFilter
from cpersona.retrieval import scoring
from cpersona.retrieval.candidates import Candidate
from cpersona.storage import Database
from cpersona.storage import search as sql
from cpersona.storage.search import ScopeSql
from hypothesis import given, settings
from hypothesis import strategies as st
from recall_support import STAMP, scoped_rows

AGENTS = ("a", "b")
PROJECTS = ("", "p", "q")
CHANNELS = ("", "c")


@pytest.fixture(scope="module")
def db() -> Iterator[Database]:
    """Rows spread over agents, projects and channels: 700 memories and 600 episodes."""
    with scoped_rows(
        [(AGENTS[i % 7 % 2], PROJECTS[i % 3], CHANNELS[i % 5 % 2], STAMP) for i in range(700)],
        [(AGENTS[i % 2], PROJECTS[i % 3], CHANNELS[i % 4 % 2]) for i in range(600)],
    ) as db:
        yield db


scopes = st.builds(
    ScopeSql,
    st.sampled_from(AGENTS),
    st.sampled_from([ProjectFilter(None), *(ProjectFilter(p) for p in PROJECTS)]),
    st.sampled_from(CHANNELS),
)


@settings(max_examples=60, deadline=None)
@given(scope=scopes, cap=st.integers(min_value=1, max_value=1_200))
def test_capped_count_is_the_count_cut_at_the_cap(db: Database, scope: ScopeSql, cap: int) -> None:
    full = sql.pool_count(db, scope)
    assert sql.pool_count(db, scope, cap=cap) == min(full, cap)


def test_capped_count_reaches_past_the_memories_into_episodes(db: Database) -> None:
    # Agent "b": fewer memories than the cap, so the episodes complete the count.
    scope = ScopeSql("b", ProjectFilter(None), "")
    memories = int(db.query_one("SELECT COUNT(*) FROM memories WHERE agent_id = 'b'")[0])
    assert memories < scoring.POOL_SATURATION < sql.pool_count(db, scope)
    assert sql.pool_count(db, scope, cap=scoring.POOL_SATURATION) == scoring.POOL_SATURATION


def _row(kind: str, score: float | None) -> Candidate:
    if kind == "profile":
        return Candidate("profile", -1, "profile", None, "")
    row = Candidate("mem", 1, "x", None, "")
    if kind == "cosine":
        row.cosine = score
    elif kind == "rrf":
        row.rrf = score
    return row


@settings(max_examples=300, deadline=None)
@given(
    pool=st.integers(min_value=0, max_value=5_000_000),
    kind=st.sampled_from(["profile", "cosine", "rrf", "unscored"]),
    score=st.floats(min_value=0.0, max_value=1.0),
    deep=st.booleans(),
    blank=st.booleans(),
)
def test_the_gate_cannot_tell_a_pool_from_its_capped_count(
    pool: int, kind: str, score: float, deep: bool, blank: bool
) -> None:
    capped = min(pool, scoring.POOL_SATURATION)
    assert scoring.heuristic_gate(capped) == scoring.heuristic_gate(pool)
    kept = [
        len(scoring.gate([_row(kind, score)], n, deep, blank, (None, None), 60))
        for n in (pool, capped)
    ]
    assert kept[0] == kept[1]
