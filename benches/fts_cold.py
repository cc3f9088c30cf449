"""The memory full-text arm in one process, on queries whose phrases the index has not cached.

``python -m benches.fts_cold DB [--mode fresh|cold|warm] [--queries natural|common]
[--seconds 30]`` (``PYTHONPATH=.`` from the repository root). DB is a copy of a corpus of
benches/million_corpus.py (``--queries natural``: its Zipf-weighted queries, 6-8 words) or of
benches/fts_bench_support.py (``--queries common``: its 60 queries); its full-text index is
brought current first (built, with its segment, when missing), so run it on a copy.

- ``fresh``: each query new, the phrase cache kept (what benches/million.py's recalls meet: the
  common words cached, most rare ones not); stops after 3,000 queries;
- ``cold``: the cache emptied before each query (every phrase computed);
- ``warm``: the queries repeated, every phrase cached.

Times `fts.search.ranked` (limit 10); prints one line: count, median, quartiles, p95, mean and
the load average at the end.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

from cpersona import _backend
from cpersona.fts import segment
from cpersona.fts.index import FtsIndex
from cpersona.fts.search import ranked
from cpersona.models import ProjectFilter
from cpersona.retrieval.query import match_terms
from cpersona.storage import open_database
from cpersona.storage.search import ScopeSql

from benches import fts_bench_support, million_corpus

FRESH_QUERIES = 3000


def _queries(kind: str, mode: str) -> list[str]:
    if kind == "common":
        return fts_bench_support.queries()
    return million_corpus.queries(FRESH_QUERIES if mode == "fresh" else 400)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("db")
    parser.add_argument("--mode", choices=("fresh", "cold", "warm"), default="fresh")
    parser.add_argument("--queries", choices=("natural", "common"), default="natural")
    parser.add_argument("--seconds", type=float, default=30.0)
    args = parser.parse_args()
    if not Path(args.db).exists():
        parser.error(f"no database at {args.db}")
    queries = _queries(args.queries, args.mode)
    db = open_database(args.db)
    index = FtsIndex(db, "memories", _backend.from_environment().FtsIndex)
    try:
        if not segment.path_of(index.path).exists():
            index.rebuild()
        core = index.current()
        scope = ScopeSql(million_corpus.AGENT, ProjectFilter(None), "")
        times: list[float] = []
        end = time.monotonic() + args.seconds
        while time.monotonic() < end and not (args.mode == "fresh" and len(times) >= len(queries)):
            q = queries[len(times) % len(queries)]
            if args.mode == "cold":
                core.clear_cache()
            start = time.perf_counter()
            ranked(index, match_terms(q), scope, "", 10)
            times.append((time.perf_counter() - start) * 1000)
    finally:
        index.close()
        db.close()
    times.sort()
    n = len(times)
    print(
        f"{args.mode} n={n} p50={statistics.median(times):.2f} p25={times[n // 4]:.2f} "
        f"p75={times[3 * n // 4]:.2f} p95={times[int(n * 0.95)]:.2f} "
        f"mean={statistics.fmean(times):.2f} ms load={os.getloadavg()[0]:.2f}"
    )


if __name__ == "__main__":
    main()
