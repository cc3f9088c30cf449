"""The full-text arm at scale: the Rust core's index against the FTS5 statement it replaces.

Corpora of 10,000 / 100,000 / 237,654 memories of one agent (plus 5% of another), each a
sentence of 8-20 common English words drawn with Zipf weights, cached on disk
(`$CPERSONA_BENCH_CACHE/fts`). Queries are bags of 6-8 common words ("maybe promotion said
decided load when hiring"), what agents send: every word becomes a trigram phrase and most rows
match. For each size:

- `fts5`: `storage.retrieval.memory_fts` (the statement the pipeline ran), limit 10;
- `index`: `fts.search.ranked` (sync check, scope hashes, the Rust search), limit 10, after
  the answers were checked equal to FTS5's for every query;
- `index_cold`: the same with the phrase cache emptied before each query (every phrase's rows
  recomputed from the trigram postings): the first query of a server process;
- the index build (rebuild from SQLite) and its resident memory are put in `extra_info`.

Run: ``python -m pytest benches/test_fts_bench.py --benchmark-enable
--benchmark-columns=median,iqr,min,rounds`` (``CPERSONA_BENCH_FTS_ROWS=10000,100000`` picks
sizes). Without ``--benchmark-enable`` it runs once on 2,000 rows as a smoke test.
"""

from __future__ import annotations

import os
import random
import resource
import time
from pathlib import Path

import pytest
from cpersona._backend import kernels
from cpersona.fts.index import FtsIndex
from cpersona.fts.search import ranked
from cpersona.models import ProjectFilter
from cpersona.retrieval.query import match_expression, match_terms
from cpersona.storage import open_database
from cpersona.storage import retrieval as sql
from cpersona.storage.retrieval import ScopeSql

pytestmark = [
    pytest.mark.timeout(3600),
    pytest.mark.skipif(not hasattr(kernels, "FtsIndex"), reason="needs the Rust core"),
]

COMMON = (
    "the be to of and a in that have it for not on with he as you do at this but his by from "
    "they we say her she or an will my one all would there their what so up out if about who "
    "get which go me when make can like time no just him know take people into year your good "
    "some could them see other than then now look only come its over think also back after use "
    "two how our work first well way even new want because any these give day most us maybe "
    "promotion said decided load hiring meeting project deadline family weekend dinner trip "
    "called friend team manager budget review plan happy tired morning evening yesterday "
    "tomorrow week month office home school doctor birthday present garden kitchen coffee"
).split()
SIZES = (10_000, 100_000, 237_654)
QUERIES = 60


def _sizes(config: pytest.Config) -> tuple[int, ...]:
    if not config.getoption("benchmark_enable", False):
        return (2_000,)
    env = os.environ.get("CPERSONA_BENCH_FTS_ROWS")
    return tuple(int(x) for x in env.split(",")) if env else SIZES


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "rows" in metafunc.fixturenames:
        sizes = _sizes(metafunc.config)
        metafunc.parametrize("rows", sizes, ids=[str(n) for n in sizes], scope="module")


def _weights() -> list[float]:
    return [1.0 / (rank + 1) for rank in range(len(COMMON))]


def _build(path: Path, rows: int) -> None:
    rng = random.Random(rows)
    weights = _weights()
    db = open_database(str(path))
    try:
        with db.atomic() as conn:
            conn.executemany(
                "INSERT INTO memories(agent_id, content, timestamp, created_at) "
                "VALUES (?, ?, '', datetime('2025-01-01', ?))",
                (
                    (
                        "bench" if i % 20 else "other",
                        f"note {i}: "
                        + " ".join(rng.choices(COMMON, weights, k=rng.randint(8, 20))),
                        f"+{i} seconds",
                    )
                    for i in range(rows)
                ),
            )
    finally:
        db.close()


@pytest.fixture(scope="module")
def corpus(rows: int, request: pytest.FixtureRequest, tmp_path_factory) -> Path:
    if request.config.getoption("benchmark_enable", False):
        base = Path(os.environ.get("CPERSONA_BENCH_CACHE", Path.home() / ".cache" / "cpersona-bench"))
        base = base / "fts"
    else:
        base = tmp_path_factory.mktemp("fts")
    base.mkdir(parents=True, exist_ok=True)
    path = base / f"fts-{rows}-v1.db"
    if not path.exists():
        tmp = path.with_suffix(".building")
        tmp.unlink(missing_ok=True)
        _build(tmp, rows)
        tmp.rename(path)
    return path


def _queries() -> list[str]:
    rng = random.Random(7)
    return [" ".join(rng.sample(COMMON[40:], rng.randint(6, 8))) for _ in range(QUERIES)]


SCOPE = ScopeSql("bench", ProjectFilter(None), "")


@pytest.fixture(scope="module")
def opened(corpus: Path):
    db = open_database(str(corpus))
    index = FtsIndex(db, "memories", kernels.FtsIndex)
    before = _rss_kib()
    start = time.perf_counter()
    built = index.rebuild()
    build_s = time.perf_counter() - start
    info = {"build_s": round(build_s, 2), "rows": built, "rss_kib": _rss_kib() - before}
    for q in _queries():  # equal before anything is timed
        want = [(h.id, h.bm25) for h in sql.memory_fts(db, SCOPE, "", match_expression(q), 10)]
        assert ranked(index, match_terms(q), SCOPE, "", 10) == want
    yield db, index, info
    index.close()
    db.close()


def _rss_kib() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def _cycle(fn):
    queries = _queries()
    state = {"i": 0}

    def one():
        q = queries[state["i"] % len(queries)]
        state["i"] += 1
        return fn(q)

    return one


def test_fts5(benchmark, opened) -> None:
    db, _, info = opened
    benchmark.extra_info.update(info)
    benchmark(_cycle(lambda q: sql.memory_fts(db, SCOPE, "", match_expression(q), 10)))


def test_index(benchmark, opened) -> None:
    _, index, info = opened
    benchmark.extra_info.update(info)
    benchmark(_cycle(lambda q: ranked(index, match_terms(q), SCOPE, "", 10)))


def test_index_cold(benchmark, opened) -> None:
    db, index, info = opened
    benchmark.extra_info.update(info)

    def cold(q: str):
        # A write empties nothing; a fresh core (what a new process loads) has an empty cache.
        index._core.clear_cache()
        return ranked(index, match_terms(q), SCOPE, "", 10)

    benchmark(_cycle(cold))
