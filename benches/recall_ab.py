"""Recall on SQLite in two checkouts side by side, interleaved, for a before/after comparison on
a busy machine (issue 31): one server process per checkout over its own copy of a cached scale
corpus (benches/scale_support.py, 384 dims), asked in turns for batches of recalls, so that both
see the same load at nearly the same time. Usage::

    python benches/recall_ab.py --before /path/to/before/python --after python --rows 10000

Each worker opens an Engine as benches/tree_compare.py does (the fixed query provider, the
corpus's vectors recorded as its model's, index files settled, 20 recalls of warm-up), then runs
`--batch` recalls per turn over distinct queries; the order of the two alternates every turn.
Prints one JSON line: per side the median, p10 and p90 of every recall (ms), and the median
and range of the per-turn ratio after/before of the batch medians.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from typing import IO, Any


def fixed_query_engine(scale: Any, copy: Any) -> Any:
    """An Engine over a scale corpus `copy` (benches/scale_support.py) whose embedder is the
    fixed query provider the corpus was written with, its vectors recorded as that model's so
    that the vector arm runs (also benches/tree_compare.py's)."""
    from cpersona.config import Settings
    from cpersona.engine import Engine
    from cpersona.storage import open_database, vector_models

    provider = scale.FixedQueryProvider(copy.query())
    db = open_database(str(copy.db_path))
    with db.atomic() as conn:
        for table in vector_models.TABLES:
            vector_models.record(conn, table, provider.name, 384, "written")
    db.close()
    settings = Settings(db_path=str(copy.db_path), embedding_mode="hashing")
    return Engine(settings, embedder=provider)


def worker(rows: int) -> None:
    """One side: an Engine over a copy of the corpus; answers "n start" lines on stdin with the
    times of n recalls. Runs in the checkout whose package `cpersona` is, with its benches/."""
    import tempfile
    import time
    from pathlib import Path

    import cpersona

    # The benches/ of the checkout whose package runs (its corpora helpers speak its storage).
    sys.path.insert(0, str(Path(cpersona.__file__).resolve().parents[2] / "benches"))
    import scale_support as scale
    from cpersona.retrieval.pipeline import RecallRequest

    corpus = scale.corpus(rows, 384)
    with tempfile.TemporaryDirectory() as tmp:
        engine = fixed_query_engine(scale, corpus.copy_to(Path(tmp)))

        def recall(query: str) -> None:
            engine.recaller.recall(RecallRequest(agent_id=scale.AGENT, query=query, limit=10))

        recall("warm up")
        indexes = [*engine.indexes.values(), *getattr(engine.services, "fts", {}).values()]
        while any(getattr(index, "healing", False) for index in indexes):
            time.sleep(0.5)  # the copy's index files are rebuilt in the background first
        for i in range(20):
            recall(f"warm up {i}")
        print("ready", flush=True)
        for line in sys.stdin:
            n, start = map(int, line.split())
            spent = []
            for i in range(start, start + n):
                began = time.perf_counter()
                recall(f"query words {i} about memory {i % 17}")
                spent.append((time.perf_counter() - began) * 1000)
            print(json.dumps(spent), flush=True)
        engine.close()


def _start(path: str, rows: int) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": os.path.abspath(path)}
    return subprocess.Popen(
        [sys.executable, __file__, "--worker", str(rows)],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


def _ask(proc: subprocess.Popen[str], n: int, start: int) -> list[float]:
    stdin: IO[str] = proc.stdin  # type: ignore[assignment]
    stdout: IO[str] = proc.stdout  # type: ignore[assignment]
    stdin.write(f"{n} {start}\n")
    stdin.flush()
    times: list[float] = json.loads(stdout.readline())
    return times


def _pct(xs: list[float], p: float) -> float:
    return round(sorted(xs)[int(p * (len(xs) - 1))], 3)


def main() -> int:
    if sys.argv[1:2] == ["--worker"]:
        worker(int(sys.argv[2]))
        return 0
    ap = argparse.ArgumentParser()
    ap.add_argument("--before", required=True)
    ap.add_argument("--after", required=True)
    ap.add_argument("--rows", type=int, default=10_000)
    ap.add_argument("--turns", type=int, default=10)
    ap.add_argument("--batch", type=int, default=20)
    args = ap.parse_args()
    # One side at a time until ready: the first builds the cached corpus the second then
    # finds (two building it at once collided on the cache file: "database is locked").
    sides = {}
    for side, tree in (("before", args.before), ("after", args.after)):
        proc = sides[side] = _start(tree, args.rows)
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    spent: dict[str, list[float]] = {"before": [], "after": []}
    ratios = []
    for turn in range(args.turns):
        order = ["before", "after"] if turn % 2 == 0 else ["after", "before"]
        medians = {}
        for side in order:
            # The same queries on both sides, new ones every turn.
            times = _ask(sides[side], args.batch, turn * args.batch)
            spent[side] += times
            medians[side] = statistics.median(times)
        ratios.append(medians["after"] / medians["before"])
    for proc in sides.values():
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait()
    out: dict[str, Any] = {"rows": args.rows, "recalls_per_side": len(spent["after"])}
    for side, xs in spent.items():
        out[side] = {"p50": _pct(xs, 0.5), "p10": _pct(xs, 0.1), "p90": _pct(xs, 0.9)}
    out["ratio_after_before"] = {
        "median": round(statistics.median(ratios), 3),
        "min": round(min(ratios), 3),
        "max": round(max(ratios), 3),
    }
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
