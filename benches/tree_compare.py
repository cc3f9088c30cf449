"""Recall and store on SQLite, timed in this process, for comparing two checkouts side by side.

Run it once per checkout, alternating, on the same cached corpus copies (the scale corpora of
benches/scale_support.py, 384 dims), e.g.::

    for round in 1 2 3; do
      PYTHONPATH=/path/to/before/python python benches/tree_compare.py --rows 10000 --label before
      PYTHONPATH=python python benches/tree_compare.py --rows 10000 --label after
    done

Each run copies the corpus, opens an Engine with the hashing-width provider the corpus was
written with, warms up, then times `recall` (a fixed set of queries, window reach) and `store`
(new rows, each the newest), and prints one JSON line: medians and p90 in ms.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import cpersona

# The benches/ of the checkout whose package runs (its corpora helpers speak its storage).
sys.path.insert(0, str(Path(cpersona.__file__).resolve().parents[2] / "benches"))

import scale_support as scale
from cpersona.engine import Engine
from cpersona.retrieval.pipeline import RecallRequest
from recall_ab import fixed_query_engine


def _settle(engine: Engine) -> None:
    """Wait until no index file is being rebuilt (a corpus copy's files may be rebuilt in the
    background at first use): the timings are of a settled server."""
    engine.recaller.recall(RecallRequest(agent_id=scale.AGENT, query="warm up", limit=10))
    indexes = list(getattr(engine, "indexes", {}).values())
    indexes += list(getattr(engine, "fts", {}).values())
    for _ in range(600):
        if not any(getattr(index, "healing", False) for index in indexes):
            return
        time.sleep(0.5)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=10_000)
    ap.add_argument("--label", default="")
    ap.add_argument("--recalls", type=int, default=200)
    ap.add_argument("--stores", type=int, default=100)
    args = ap.parse_args()
    corpus = scale.corpus(args.rows, 384)
    with tempfile.TemporaryDirectory() as tmp:
        engine = fixed_query_engine(scale, corpus.copy_to(Path(tmp)))
        try:
            _settle(engine)
            queries = [f"query words {i} about memory {i % 17}" for i in range(args.recalls)]
            for q in queries[:20]:
                engine.recaller.recall(RecallRequest(agent_id=scale.AGENT, query=q, limit=10))
            recall = []
            for q in queries:
                start = time.perf_counter()
                engine.recaller.recall(RecallRequest(agent_id=scale.AGENT, query=q, limit=10))
                recall.append((time.perf_counter() - start) * 1000)
            store = []
            for i in range(args.stores):
                start = time.perf_counter()
                message = {"content": f"a new memory number {i} at {time.time()}"}
                engine.writer.store(scale.AGENT, message, "", "")
                store.append((time.perf_counter() - start) * 1000)
        finally:
            engine.close()

    def q(xs: list[float], p: float) -> float:
        return sorted(xs)[int(p * (len(xs) - 1))]

    print(
        json.dumps(
            {
                "label": args.label,
                "rows": args.rows,
                "recall_p50": round(statistics.median(recall), 3),
                "recall_p90": round(q(recall, 0.9), 3),
                "store_p50": round(statistics.median(store), 3),
                "store_p90": round(q(store, 0.9), 3),
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
