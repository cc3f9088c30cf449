"""Search latency of the mapped segment against the heap index, interleaved in one process
(docs/notes/performance-notes.md, "One copy per host").

`python -m benches.fts_segment_speed` copies the 100,000-row corpus of benches/fts_processes.py
(build it first with that script), opens one index mapped from its segment and one held in the
heap (the segment moved aside), checks that both answer the 60 queries of
benches/fts_bench_support.py identically, then times them three times each, alternating:
`warm` with the phrase cache kept, `cold` with it emptied before each query."""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import fts_bench_support as support
from cpersona import _backend
from cpersona.fts import segment
from cpersona.fts.index import FtsIndex
from cpersona.fts.search import ranked
from cpersona.models import ProjectFilter
from cpersona.retrieval.query import match_terms
from cpersona.storage import open_database
from cpersona.storage.search import ScopeSql

SCOPE = ScopeSql("bench", ProjectFilter(None), "")


def main() -> None:
    kernels = _backend.from_environment()
    cache = os.environ.get("CPERSONA_BENCH_CACHE")
    base = (Path(cache) if cache else Path.home() / ".cache" / "cpersona-bench") / "fts"
    with tempfile.TemporaryDirectory() as where:
        path = Path(where) / "bench.db"
        shutil.copy(base / "fts-100000-v1.db", path)
        db = open_database(str(path))
        FtsIndex(db, "memories", kernels.FtsIndex).rebuild()
        mapped = FtsIndex(db, "memories", kernels.FtsIndex)
        assert mapped.current().segment is not None
        segment.MIN_ROWS = 10**12  # the next index stays in the heap
        segment.path_of(mapped.path).rename(Path(where) / "aside")
        heap = FtsIndex(db, "memories", kernels.FtsIndex)
        assert heap.current().segment is None
        queries = [match_terms(q) for q in support.queries()]
        for q in queries:
            assert ranked(heap, q, SCOPE, "", 10) == ranked(mapped, q, SCOPE, "", 10)
        times: dict[tuple[str, str], list[float]] = {}
        for mode in ("warm", "cold"):
            for name, index in (("heap", heap), ("mapped", mapped)) * 3:
                core = index.current()
                for q in queries:
                    if mode == "cold":
                        core.clear_cache()
                    start = time.perf_counter()
                    ranked(index, q, SCOPE, "", 10)
                    times.setdefault((mode, name), []).append(time.perf_counter() - start)
        for (mode, name), ts in sorted(times.items()):
            ts.sort()
            q1, q3 = ts[len(ts) // 4], ts[3 * len(ts) // 4]
            print(
                f"{mode} {name}: p50 {1000 * statistics.median(ts):.2f} ms, "
                f"IQR {1000 * q1:.2f}-{1000 * q3:.2f} ms, n={len(ts)}"
            )
        heap.close()
        mapped.close()
        db.close()


if __name__ == "__main__":
    main()
