"""Time-scoped vector scans (issue 22): the index files' per-row instant against the fallbacks.

Random rows get stamps in many forms (offsets, `Z`, none, dates, fractions, garbage, empty:
then `created_at` times the row) and random ranges (tests/span_support.py); the vector index
scan (Rust and numpy), the SQLite window scan and the reference (vecindex_support: every row
read and filtered in Python) must give identical answers: the range is applied before the
window, so the window of a range is that range's newest rows.
"""

from __future__ import annotations

import random
from datetime import UTC

import numpy as np
import pytest
from cpersona.memory.text import parse_utc
from cpersona.models import ProjectFilter
from cpersona.timerange import NO_TIME, TimeRange, micros, row_time
from cpersona.vectors.index import VectorIndex
from cpersona.vectors.search import Scope
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from span_support import BOUNDS, ROWS, half_synced, span_of
from vecindex_support import Probe, check_probe


@pytest.mark.parametrize("table", ["memories", "episodes"])
@settings(
    max_examples=60,
    deadline=None,
    # kernels is session-scoped; tmp_path_factory gives each example its own directory
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    rows=ROWS,
    since=BOUNDS,
    until=BOUNDS,
    window=st.integers(0, 12),
    reach=st.integers(0, 30),
    k=st.integers(0, 8),
    seed=st.integers(0, 2**16),
)
def test_index_scan_equals_sqlite_and_reference_in_a_range(
    tmp_path_factory, kernels, table, rows, since, until, window, reach, k, seed
):
    path = tmp_path_factory.mktemp("span") / "db.sqlite"
    with half_synced(path, table, rows, VectorIndex) as (db, index):
        query = np.array(random.Random(seed).choices([-1.0, 0.0, 1.0, 2.0], k=4), np.float32)
        scope = Scope("a", ProjectFilter(None), "", "", span_of(since, until))
        probe = Probe(table, query, scope, window, reach, -1.0, k, k)
        check_probe(db, {table: index}, probe, kernels=kernels)
        assert index.verify() == []


@given(
    stamp=st.one_of(
        st.datetimes(timezones=st.sampled_from([UTC, None])).map(lambda t: t.isoformat()),
        st.text(max_size=30),
    ),
    created=st.sampled_from(["2024-03-05 10:00:00", "not a time", ""]),
)
def test_row_time_reads_the_stamp_as_recall_with_context_does(stamp, created):
    instant = parse_utc(stamp) or parse_utc(created)
    key = row_time(stamp, created)
    if instant is None:
        assert key == NO_TIME
        assert not TimeRange(None, None).admits(key)
    else:
        assert key == micros(instant)
        assert TimeRange(key, key + 1).admits(key)
        assert not TimeRange(key + 1, None).admits(key)
        assert not TimeRange(None, key).admits(key)
