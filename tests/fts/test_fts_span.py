"""The time-scoped full-text arm (issue 22): the index's per-row instant against FTS5.

Rows and ranges as in tests/span_support.py. The index and the FTS5 statement give the same
ids and bm25 doubles, and both equal the unscoped ranking filtered to the range, then cut to
the limit (the range goes before the limit; bm25 statistics stay the whole table's).
"""

from __future__ import annotations

import pytest
from cpersona.models import ProjectFilter
from cpersona.retrieval.query import match_expression
from cpersona.storage import search as sql
from cpersona.storage.search import ScopeSql
from fts_support import HAS_CORE, fts_index, indexed
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from span_support import BOUNDS, ROWS, half_synced, instants, span_of

pytestmark = pytest.mark.skipif(not HAS_CORE, reason="the full-text index needs the Rust core")


@pytest.mark.parametrize("table", ["memories", "episodes"])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    rows=ROWS,
    since=BOUNDS,
    until=BOUNDS,
    query=st.sampled_from(["kubernetes", "rollout", "kubernetes rollout plan", "menu"]),
    limit=st.sampled_from([1, 3, 50]),
)
def test_full_text_index_equals_fts5_in_a_range(
    tmp_path_factory, table, rows, since, until, query, limit
):
    path = tmp_path_factory.mktemp("span") / "db.sqlite"
    with half_synced(path, table, rows, fts_index) as (db, index):
        span = span_of(since, until)
        scope = ScopeSql("a", ProjectFilter(None), "", span=span)
        match = match_expression(query)
        if table == "memories":
            hits = sql.memory_fts(db, scope, "", match, limit)
        else:
            hits = sql.episode_fts(db, scope, match, limit)  # type: ignore[assignment]
        fts5 = [(h.id, h.bm25) for h in hits]
        assert indexed(index, query, scope, limit) == fts5
        everything = indexed(index, query, ScopeSql("a", ProjectFilter(None), ""), 10_000)
        keys = instants(db, table)
        assert everything is not None
        assert fts5 == [h for h in everything if span is None or span.admits(keys[h[0]])][:limit]
        assert index.verify() == []
