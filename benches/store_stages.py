"""Where a store's time goes, in one process, on the natural-vocabulary corpora (issue 20 item 4).

``PYTHONPATH=. nice -n 5 python -m benches.store_stages [--rows 1000000] [--stores 150]``

A private copy of the cached corpus of `benches/million_corpus.py` (built on first use) is
opened by an Engine as the stdio server opens it (hashing embedder, start-up calibration off);
a few recalls load the full-text core (so each write's full-text catch-up is measured, as in a
server that has answered a recall), then `--stores` calls of the `store` tool's handler, each
after a trivial `get_profile`, with new content and a new msg_id. Each stage of the write is
timed by wrapping the function that does it: the embedding, the SQLite transaction (dedup probe
and insert, its triggers and the commit), each table's vector index sync and full-text
refresh, and inside the memories sync the opening, the changed rows' read, the live-slot
lookup, the append and its checksum. Prints p50 / p95 / max per stage, as JSON with `--json`.

The first store of a fresh copy also trims the change logs the bulk build left (1,000,000
`fts_log` entries at 1M: about a second, once); it is reported as `first_store_ms` and left
out of the percentiles.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cpersona.config import Settings
from cpersona.engine import Engine
from cpersona.server.registry import coerce
from cpersona.server.tools import by_name
from cpersona.storage import embeddings as vector_sql
from cpersona.storage import writes
from cpersona.vectors import checksums, format, index, slots

from benches import million as mb
from benches import million_corpus as mc


class Stages:
    """Per-stage durations (ms) of the calls made while `on`."""

    def __init__(self) -> None:
        self.times: dict[str, list[float]] = {}
        self.on = False

    def wrap(self, owner: Any, name: str, stage: str) -> None:
        inner: Callable[..., Any] = getattr(owner, name)

        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return inner(*args, **kwargs)
            finally:
                if self.on:
                    ms = (time.perf_counter() - start) * 1e3
                    self.times.setdefault(stage, []).append(ms)

        setattr(owner, name, timed)


def run(rows: int, stores: int, work: Path) -> dict[str, Any]:
    db = mb._copy(mc.corpus(rows), work)
    os.sync()  # the copy written back before anything is timed (benches/million.py says why)
    settings = Settings(
        db_path=str(db),
        embedding_mode="hashing",
        calibrate_on_model_change=False,
    )
    engine = Engine(settings)
    tools = by_name()

    def call(name: str, args: dict[str, Any]) -> tuple[dict[str, Any], float]:
        spec = tools[name]
        start = time.perf_counter()
        out = spec.handler(engine, coerce(spec, args))
        engine.db.release_reader()  # as the server does at the end of each call
        return out, (time.perf_counter() - start) * 1e3

    st = Stages()
    st.wrap(writes, "store_memory", "sqlite transaction")
    st.wrap(engine.writer, "_memory_vector", "embedding")
    for table, vec in engine.indexes.items():
        st.wrap(vec, "sync", f"vector sync {table}")
    for table, fts in engine.fts.items():
        st.wrap(fts, "after_write", f"full-text refresh {table}")
    st.wrap(index.VectorIndex, "_open_for_update", "  sync: open (both tables)")
    st.wrap(vector_sql, "rows_by_id", "  sync: changed rows' read")
    if hasattr(slots, "KeptWriter"):  # the sync keeps its writer (since issue 20 item 4)
        st.wrap(slots.KeptWriter, "live_slots", "  sync: live slots")
    else:  # earlier trees: the sync's own pass over the ids
        st.wrap(index, "live_slots", "  sync: live slots")
    st.wrap(format.VectorFileWriter, "append", "  sync: append")
    st.wrap(checksums.SumWriter, "record", "  sync: checksum")
    queries = mc.queries(stores + 20, seed=11)
    try:
        for q in queries[:8]:
            call("recall", {"agent_id": mc.AGENT, "query": q, "limit": 10})
        stamp = time.time_ns()
        first = call("store", {"agent_id": mc.AGENT, "message": {"content": f"first {stamp}"}})
        trivial, store = [], []
        st.on = True
        for i in range(stores):
            trivial.append(call("get_profile", {"agent_id": mc.AGENT})[1])
            message = {"id": f"stages-{stamp}-{i}", "content": f"{queries[8 + i]} stored {i}"}
            out, ms = call("store", {"agent_id": mc.AGENT, "message": message})
            assert out["result"] == "stored", out
            store.append(ms)
    finally:
        engine.close()
    summary = {
        name: {
            "p50": round(statistics.median(v), 3),
            "p95": round(mb._pct(v, 0.95), 3),
            "max": round(max(v), 3),
            "n": len(v),
        }
        for name, v in {"store (handler)": store, "get_profile": trivial, **st.times}.items()
    }
    return {"rows": rows, "first_store_ms": round(first[1], 1), "stages": summary}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--stores", type=int, default=150)
    parser.add_argument("--work", default=str(mc.cache_dir() / "work" / "stages"))
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = run(args.rows, args.stores, Path(args.work))
    if args.json:
        print(json.dumps(result, indent=1))
        return
    print(f"{args.rows:,} rows; first store {result['first_store_ms']} ms")
    for name, s in result["stages"].items():
        line = f"p50 {s['p50']:7.3f}  p95 {s['p95']:7.3f}  max {s['max']:8.3f}  n {s['n']}"
        print(f"{name:32s} {line}")


if __name__ == "__main__":
    main()
