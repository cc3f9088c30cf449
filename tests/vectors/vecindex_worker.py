"""A worker for the concurrency test: `python vecindex_worker.py DB NAME SEED OPS`.

Stores, deletes its own rows, archives episodes and scans both tables of the shared database,
`OPS` steps in all, printing one JSON line per step:

    {"stored": id, "agent": a}   {"archived": id, "agent": a}   {"deleted": id}
    {"scan": table, "agent": a, "ids": [...]}

Any exception ends the process with a traceback and a non-zero exit code.
`VECTEST_HEADROOM` / `VECTEST_TRIM_EVERY` shrink the index's spare slots and log retention so
that the file grows, compacts and trims its log while the other process reads it.
"""

from __future__ import annotations

import json
import os
import random
import sys

import cpersona.vectors.index as ix
from cpersona.config import Settings
from cpersona.embedding.hashing import HashingProvider
from cpersona.engine import Engine
from cpersona.models import ProjectFilter
from cpersona.storage.scan_request import ScanLimits
from cpersona.vectors.search import Scope, scan


def emit(**record: object) -> None:
    print(json.dumps(record), flush=True)


def main() -> None:
    db, name, seed, ops = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    if os.environ.get("VECTEST_HEADROOM"):
        ix.HEADROOM = int(os.environ["VECTEST_HEADROOM"])
    if os.environ.get("VECTEST_TRIM_EVERY"):
        ix.TRIM_EVERY = int(os.environ["VECTEST_TRIM_EVERY"])
    rng = random.Random(seed)
    emb = HashingProvider()
    engine = Engine(Settings(db_path=db, embedding_mode="hashing"), embedder=emb)
    w = engine.writer
    mine: list[tuple[int, str]] = []
    for i in range(ops):
        agent = rng.choice("ab")
        roll = rng.random()
        if roll < 0.4:
            out = w.store(
                agent,
                {"content": f"{name} {i} {rng.choice(['tea', 'code', 'map'])}"},
                rng.choice(["", "c1"]),
                rng.choice(["", "p1"]),
            )
            if out.get("result") == "stored":
                mine.append((out["id"], agent))
                emit(stored=out["id"], agent=agent)
        elif roll < 0.55 and mine:
            row, owner = mine.pop(rng.randrange(len(mine)))
            out = w.delete_memory(row, owner)
            assert out["ok"], out
            emit(deleted=row)
        elif roll < 0.62:
            out = w.archive_episode(agent, f"{name} episode {i}", [], "", False, "", "")
            emit(archived=out["episode_id"], agent=agent)
        else:
            table = rng.choice(["memories", "episodes"])
            query = emb.embed([rng.choice(["tea", "code map", "episode"])])[0]
            sc = Scope(agent, ProjectFilter(rng.choice([None, "", "p1"])), rng.choice(["", "c1"]))
            window = rng.choice([5, 50, 1000])
            hits = scan(
                engine.indexes[table],
                query,
                sc,
                ScanLimits(window, rng.choice([0, window + 20]), -1.0, k=1000, far_k=1000),
            )
            ids = [int(x) for x in hits.near_ids] + [int(x) for x in hits.far_ids]
            emit(scan=table, agent=agent, ids=ids)
    engine.close()
    emit(done=name)


if __name__ == "__main__":
    main()
