"""A fresh reader process: `python vecindex_reader.py DB SEED`.

Opens the database, checks `scan` == `scan_sqlite` (ids, order, scores) for seeded random
probes on both tables, runs `verify()`, and prints one JSON object: the ids of each table and
the problems verify found. The kernels are those `CPERSONA_KERNEL` names.
"""

from __future__ import annotations

import json
import random
import sys

from cpersona import _backend
from cpersona.embedding.hashing import HashingProvider
from cpersona.storage import open_database
from cpersona.vectors.index import VectorIndex
from vecindex_support import TABLES, Probe, check_probe, scope

KERNEL = _backend.name_of(_backend.from_environment())


def main() -> None:
    path, seed = sys.argv[1], int(sys.argv[2])
    rng = random.Random(seed)
    db = open_database(path, fts_enabled=True)
    indexes = {t: VectorIndex(db, t) for t in TABLES}
    emb = HashingProvider()
    checked = 0
    for _ in range(12):
        table = rng.choice(TABLES)
        query = emb.embed([rng.choice(["tea note", "rust rewrite", "episode mmap", "sqlite"])])[0]
        sc = scope(
            rng.choice("ab"),
            rng.choice([None, "", "p1"]),
            rng.choice(["", "c1"]),
            rng.choice(["", "", "s1"]),
        )
        window = rng.choice([0, 3, 10, 1000])
        reach = rng.choice([0, window, window + 5, window + 1000])
        probe = Probe(
            table,
            query,
            sc,
            window,
            reach,
            rng.choice([-1.0, 0.0, 0.2]),
            rng.choice([1, 5, 1000]),
            rng.choice([0, 3, 1000]),
        )
        check_probe(db, indexes, probe, exact_ref=False)
        checked += 1
    result = {
        "kernel": KERNEL,
        "checked": checked,
        "problems": [p for t in TABLES for p in indexes[t].verify()],
        "ids": {t: [int(r[0]) for r in db.query(f"SELECT id FROM {t}")] for t in TABLES},
    }
    for index in indexes.values():
        index.close()
    db.close()
    print(json.dumps(result))


if __name__ == "__main__":
    main()
