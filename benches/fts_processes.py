"""Resident memory and time to first search of server-like processes over one full-text index
(docs/notes/performance-notes.md, "Full-text index: one copy per host").

`python -m benches.fts_processes --rows 100000 --procs 1,4 --rounds 5` builds (or reuses) the
natural-vocabulary corpus of benches/fts_bench_support.py in `$CPERSONA_BENCH_CACHE/fts`, copies
it into a temporary directory, builds its index files once, then per round starts `procs`
processes at once. Each imports cpersona, opens the database and the index, runs one search
(the timed span: from just before `Popen` to the answer), then reports from
/proc/self/smaps_rollup: Rss, Anonymous (private heap) and Rss - Anonymous (file-backed
pages: the mapped segment, shared through the page cache, and the libraries). All processes
of a round stay alive until every one has reported, so four share one file at once.
`CPERSONA_FTS_SEGMENT=false` in the environment gives the heap-only path ("before").
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CHILD = r"""
import json, sys, time
start = float(sys.argv[2])
from cpersona import _backend
from cpersona.fts.index import FtsIndex
from cpersona.fts.search import ranked
from cpersona.models import ProjectFilter
from cpersona.retrieval.query import match_terms
from cpersona.storage import open_database
from cpersona.storage.search import ScopeSql
kernels = _backend.from_environment()
db = open_database(sys.argv[1])
index = FtsIndex(db, "memories", kernels.FtsIndex)
hits = ranked(index, match_terms("maybe promotion said decided load when hiring"),
              ScopeSql("bench", ProjectFilter(None), ""), "", 10)
first = time.time() - start
for q in ("family weekend dinner trip", "coffee kitchen garden present", "the be to of and"):
    ranked(index, match_terms(q), ScopeSql("bench", ProjectFilter(None), ""), "", 10)
roll = {}
with open("/proc/self/smaps_rollup") as f:
    for line in f:
        parts = line.split()
        if len(parts) >= 3 and parts[-1] == "kB":
            roll[parts[0].rstrip(":")] = int(parts[1])
core = index.current()
print(json.dumps({"first_s": first, "hits": len(hits or []), "rss_kib": roll["Rss"],
                  "anon_kib": roll["Anonymous"], "file_kib": roll["Rss"] - roll["Anonymous"],
                  "pss_kib": roll["Pss"], "mapped": core.segment is not None}), flush=True)
sys.stdin.read()
"""


def corpus(rows: int) -> Path:
    sys.path.insert(0, str(Path(__file__).parent))
    import fts_bench_support as support

    cache = os.environ.get("CPERSONA_BENCH_CACHE")
    base = (Path(cache) if cache else Path.home() / ".cache" / "cpersona-bench") / "fts"
    base.mkdir(parents=True, exist_ok=True)
    path = base / f"fts-{rows}-v1.db"
    if not path.exists():
        support.build(path, rows)
    return path


def round_of(db: Path, procs: int) -> list[dict[str, float]]:
    children = []
    for _ in range(procs):
        start = time.time()
        children.append(
            subprocess.Popen(
                [sys.executable, "-c", CHILD, str(db), repr(start)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
        )
    out = []
    for child in children:
        assert child.stdout is not None
        out.append(json.loads(child.stdout.readline()))
    for child in children:
        child.communicate("")
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--procs", default="1,4")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="cpersona-ftsproc-") as where:
        db = Path(where) / "bench.db"
        shutil.copy(corpus(args.rows), db)
        from cpersona import _backend
        from cpersona.fts.index import FtsIndex
        from cpersona.storage import open_database

        opened = open_database(str(db))
        FtsIndex(opened, "memories", _backend.from_environment().FtsIndex).rebuild()
        opened.close()
        round_of(db, 1)  # the first open writes the segment (and warms the page cache)
        for procs in (int(p) for p in args.procs.split(",")):
            samples = [s for _ in range(args.rounds) for s in round_of(db, procs)]
            report = {"rows": args.rows, "procs": procs, "samples": len(samples)}
            for key in ("first_s", "rss_kib", "anon_kib", "file_kib", "pss_kib"):
                values = [s[key] for s in samples]
                report[key] = {
                    "median": round(statistics.median(values), 3),
                    "min": round(min(values), 3),
                    "max": round(max(values), 3),
                }
            report["mapped"] = all(s["mapped"] for s in samples)
            print(json.dumps(report), flush=True)


if __name__ == "__main__":
    main()
