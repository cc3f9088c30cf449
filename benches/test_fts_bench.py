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

import resource
import time
from pathlib import Path

import fts_bench_support as support
import pytest
from cpersona import _backend
from cpersona.fts.index import FtsIndex
from cpersona.fts.search import ranked
from cpersona.models import ProjectFilter
from cpersona.retrieval.query import match_expression, match_terms
from cpersona.storage import open_database
from cpersona.storage import search as sql
from cpersona.storage.search import ScopeSql

kernels = _backend.from_environment()


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    support.parametrize_rows(metafunc)


@pytest.fixture(scope="module")
def corpus(rows: int, request: pytest.FixtureRequest, tmp_path_factory) -> Path:
    return support.corpus_path(rows, request, tmp_path_factory)


pytestmark = [
    pytest.mark.timeout(3600),
    pytest.mark.skipif(not hasattr(kernels, "FtsIndex"), reason="needs the Rust core"),
]

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
    for q in support.queries():  # equal before anything is timed
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
    queries = support.queries()
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
    _, index, info = opened
    benchmark.extra_info.update(info)

    def cold(q: str):
        # A write empties nothing; a fresh core (what a new process loads) has an empty cache.
        index._core.clear_cache()
        return ranked(index, match_terms(q), SCOPE, "", 10)

    benchmark(_cycle(cold))
