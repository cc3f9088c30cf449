"""The first recalls on a database whose index files are gone (issue 20 item 2), by hand:
`python -m benches.rebuild_background [--rows 100000] [--recalls 20]`.

Copies the cached scale corpus (benches/scale_support.py; built if missing), deletes its
vector and full-text index files, opens an Engine on it (the embedder replaced by a fixed
query vector) and reports: the first recall (which finds the files missing), the recalls
made while a rebuild runs (p50 / max), how long until both rebuilds are done, and one recall
after. Run against an older tree (`PYTHONPATH=<tree>/python`) for the before column: there
the first recall is the blocking rebuild.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from cpersona.config import Settings
from cpersona.engine import Engine
from cpersona.retrieval.pipeline import RecallRequest
from cpersona.storage import open_database, vector_models

from benches import scale_support as scale


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--recalls", type=int, default=20)
    args = parser.parse_args()
    corpus = scale.corpus(args.rows, 384)
    with tempfile.TemporaryDirectory(prefix="cpersona-rebuild-") as tmp:
        work = corpus.copy_to(Path(tmp))
        for suffix in ("memories.vec", "episodes.vec", "memories.fts", "episodes.fts"):
            for path in Path(tmp).glob(f"{work.db_path.name}.{suffix}*"):
                path.unlink()
        embedder = scale.FixedQueryProvider(work.query())
        db = open_database(str(work.db_path))
        with db.atomic() as conn:  # the corpus's vectors are the fixed provider's: vector arm on
            vector_models.record(conn, "memories", embedder.name, 384, "bench")
        db.close()
        settings = Settings(db_path=str(work.db_path), embedding_mode="hashing")
        engine = Engine(settings, embedder=embedder)
        req = RecallRequest(agent_id=scale.AGENT, query=scale.QUERY_TEXT, limit=10)
        try:
            assert engine.services  # built before the clock starts: the same in both trees
            opened = time.perf_counter()
            with engine.activity.call():
                first = engine.recaller.recall(req)
            first_ms = 1000 * (time.perf_counter() - opened)
            indexes = [*engine.indexes.values(), *engine.fts.values()]
            during = []
            while any(ix.healing for ix in indexes) and len(during) < args.recalls:
                t = time.perf_counter()
                with engine.activity.call():  # as the dispatch does: the rebuild gives way
                    engine.recaller.recall(req)
                during.append(1000 * (time.perf_counter() - t))
            for ix in indexes:
                ix.wait_for_healing()
            ready_s = time.perf_counter() - opened
            t = time.perf_counter()
            after = engine.recaller.recall(req)
            after_ms = 1000 * (time.perf_counter() - t)
        finally:
            engine.close()
    same = [(r.kind, r.id, r.cosine) for r in first.rows] == [
        (r.kind, r.id, r.cosine) for r in after.rows
    ]
    print(f"rows {args.rows}: first recall {first_ms:.0f} ms ({len(first.rows)} rows)")
    if during:
        print(
            f"  {len(during)} recalls during the rebuild: p50 {statistics.median(during):.0f} ms, "
            f"max {max(during):.0f} ms"
        )
    print(f"  both indexes ready {ready_s:.1f} s after the first recall began")
    print(f"  a recall after: {after_ms:.1f} ms; same rows as the first: {same}")


if __name__ == "__main__":
    main()
