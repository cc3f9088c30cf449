"""Recall's SQL stays cheap however many rows the agent has (docs/notes/performance-notes.md).

- Hydration reads the survivors by rowid. With the scope in the WHERE clause and no ANALYZE
  statistics, SQLite preferred the agent index and tested every row of the agent against the
  id list: 29 ms to hydrate 10 rows of a 237,654-row agent. The plan must be rowid lookups.
- The timestamp span is read as two ordered single-row reads, and equals the MIN()/MAX() it
  replaced (40 ms at 237,654 rows) on every kind of stored timestamp.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from cpersona.models import ProjectFilter
from cpersona.storage import Database
from cpersona.storage import search as sql
from cpersona.storage.search import ScopeSql
from recall_support import STAMP, scoped_rows


@pytest.fixture
def db() -> Iterator[Database]:
    """50 memories and 50 episodes, all of agent a, project p, channel c."""
    with scoped_rows([("a", "p", "c", STAMP)] * 50, [("a", "p", "c")] * 50) as db:
        yield db


def plans(db: Database, call: Any) -> list[str]:
    """The query plan of every statement `call(db)` runs."""
    seen: list[tuple[str, list[object]]] = []
    query = db.query

    def record(statement: str, params: Any = ()) -> Any:
        seen.append((statement, list(params)))
        return query(statement, params)

    db.query = record  # type: ignore[method-assign]
    try:
        call(db)
    finally:
        del db.query
    assert seen
    return [
        str(row[3])
        for statement, params in seen
        for row in query(f"EXPLAIN QUERY PLAN {statement}", params)
    ]


@pytest.mark.parametrize("channel", ["", "c"])
@pytest.mark.parametrize("project", [None, "", "p"])
def test_hydration_uses_rowid_lookups(db: Database, project: str | None, channel: str) -> None:
    scope = ScopeSql("a", ProjectFilter(project), channel)
    ids = list(range(3, 23))  # a recall hydrates up to limit + far_k ids (10 + 10 by default)
    for call in (
        lambda d: sql.memories_by_id(d, ids, scope, ""),
        lambda d: sql.memories_by_id(d, ids, scope, "src"),
        lambda d: sql.episodes_by_id(d, ids, scope),
    ):
        for plan in plans(db, call):
            assert "INTEGER PRIMARY KEY" in plan, plan


def test_hydration_still_applies_the_scope(db: Database) -> None:
    found = sql.memories_by_id(db, [1, 2, 3], ScopeSql("b", ProjectFilter(None), ""), "")
    assert found == {}
    found = sql.memories_by_id(db, [1, 2, 3], ScopeSql("a", ProjectFilter("p"), "c"), "")
    assert sorted(found) == [1, 2, 3]
    assert sorted(sql.episodes_by_id(db, [4, 99], ScopeSql("a", ProjectFilter(""), ""))) == []
    assert sorted(sql.episodes_by_id(db, [4, 99], ScopeSql("a", ProjectFilter(None), ""))) == [4]


SPAN_STAMPS = [
    ("a", "p", "c", "2024-03-01T10:00:00+00:00"),
    ("a", "p", "", "2023-12-31 23:59:59"),
    ("a", "", "c", "2025-01-01T00:00:00Z"),
    ("a", "", "", ""),  # empty: ignored
    ("a", "p", "c", "yesterday"),  # not parseable: ignored
    ("a", "q", "", "1999-01-01"),
    ("a", "", "d", "2030-06-01T12:00:00.123456+09:00"),
    ("a", "p", "", "zz not a date"),  # sorts last as text, not parseable
    ("a", "p", "", "0001-01-01 garbage"),  # sorts first as text, not parseable
    ("b", "", "", "2040-01-01"),
]


def old_span(db: Database, scope: ScopeSql) -> tuple[object, object]:
    where, params = scope.where()
    row = db.query_one(
        f"""SELECT MIN(timestamp), MAX(timestamp) FROM memories
            WHERE {where} AND timestamp != '' AND julianday(timestamp) IS NOT NULL""",
        params,
    )
    return (row[0], row[1]) if row else (None, None)


@pytest.mark.parametrize("agent", ["a", "b", "nobody"])
@pytest.mark.parametrize("channel", ["", "c", "d"])
@pytest.mark.parametrize("project", [None, "", "p", "q"])
def test_timestamp_span_equals_min_and_max(agent: str, project: str | None, channel: str) -> None:
    with scoped_rows(SPAN_STAMPS) as db:
        scope = ScopeSql(agent, ProjectFilter(project), channel)
        assert sql.timestamp_span(db, scope) == old_span(db, scope)
