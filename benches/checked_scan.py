"""The vector scan with and without its content checksums, every row of a table in the window.

``python -m benches.checked_scan DB [SCANS]``: DB is an SQLite corpus whose memories.vec and
.sum files are built (benches/million_corpus.py caches them under
~/.cache/cpersona-bench/million). Alternates checked and unchecked scans of fresh random
queries and prints the median and the 10th/90th percentiles of each, in milliseconds: the
checksum's share of a scan (docs/performance.md, "1,000,000 memories").
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import sys
import time
from pathlib import Path

import cpersona._core as core
import numpy as np
from cpersona.derived.scope import scope_hash
from cpersona.vectors import checksums


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("db", help="an SQLite corpus whose memories.vec and .sum are built")
    parser.add_argument("scans", nargs="?", type=int, default=60)
    args = parser.parse_args(argv)
    db, n = args.db, args.scans
    path = db + ".memories.vec"
    # sqlite3.connect would create an empty database under a mistyped name.
    if not Path(db).is_file() or not Path(path).is_file():
        parser.error(f"{db} is not a corpus with a built vector index ({path} is missing)")
    agent = sqlite3.connect(db).execute("SELECT agent_id FROM memories LIMIT 1").fetchone()[0]
    handle = core.VectorIndex.open(path)
    sums = checksums.open_read(Path(path), handle.capacity)
    rng = np.random.default_rng(1)
    anything = np.zeros(0, dtype=np.uint64)
    times: dict[bool, list[float]] = {True: [], False: []}
    for _ in range(n):
        for checked in (True, False):
            q = rng.standard_normal(handle.dim).astype(np.float32)
            q /= np.linalg.norm(q)
            extra = {"sums": sums} if checked else {}
            start = time.perf_counter()
            handle.scan(
                q,
                scope_hash(agent),
                anything,
                anything,
                anything,
                handle.count,
                0,
                0.0,
                10,
                0,
                4096,
                **extra,
            )
            times[checked].append((time.perf_counter() - start) * 1000)
    print(f"{handle.count} rows x {handle.dim}")
    for checked in (True, False):
        v = sorted(times[checked])
        print(
            f"{'checked' if checked else 'unchecked':>9}: median {statistics.median(v):.2f} ms"
            f" (p10 {v[len(v) // 10]:.2f}, p90 {v[9 * len(v) // 10]:.2f}), n={len(v)}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
