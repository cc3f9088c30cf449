"""A writer process for the full-text index crash and concurrency tests:
`python fts_writer.py DB SEED OPS PAUSE`.

Stores, updates and deletes memories and episodes through SQL, bringing the full-text indexes
current after each write (as the server's post-write hook does), printing `stored <id>` once a
store is committed. Every tenth step it compares the index's answer for a query with FTS5's
and prints `mismatch ...` if they differ. PAUSE names where to announce `PAUSE` and sleep for
the test to kill it:

    mid_append   the memories file is marked dirty and half a batch of records is written
    mid_rebuild  a rebuild has written its first batch into the temporary file
    ""           nowhere (the test kills at a random moment, or lets it finish)
"""

from __future__ import annotations

import os
import random
import sys
import time
from typing import Any

import cpersona.fts.index as ix
import cpersona.fts.rebuild as rb
from cpersona.fts.format import HEADER_LEN
from cpersona.storage import open_database
from fts_support import fts_index, indexed, oracle, scope

DB, SEED, OPS, PAUSE = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
WORDS = [
    "the",
    "then",
    "there",
    "when",
    "maybe",
    "promotion",
    "decided",
    "load",
    "hiring",
    "東京都",
    "日本語",
    "café",
    "🙂🙂🙂",
]


def hold() -> None:
    print("PAUSE", flush=True)
    time.sleep(120)
    sys.exit(3)


class _Os:
    """`os` for the index module, stopping halfway through a record append."""

    def __getattr__(self, name: str) -> object:
        return getattr(os, name)

    @staticmethod
    def pwrite(fd: int, data: bytes, offset: int) -> int:
        if offset > HEADER_LEN and len(data) > 1 and os.environ.get("FTS_ARMED") == "1":
            os.pwrite(fd, data[: len(data) // 2], offset)
            hold()
        return os.pwrite(fd, data, offset)


if PAUSE == "mid_append":
    ix.os = _Os()  # type: ignore[assignment]
elif PAUSE == "mid_rebuild":
    rb.BATCH = 20
    original = rb._write_batch

    def write_then_hold(*args: Any) -> Any:
        out = original(*args)
        hold()
        return out

    rb._write_batch = write_then_hold

rng = random.Random(SEED)
db = open_database(DB)
indexes = {t: fts_index(db, t) for t in ("memories", "episodes")}
for step in range(OPS):
    text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 12))) + f" #{SEED}-{step}"
    agent = rng.choice(["a", "b"])
    kind = rng.random()
    with db.atomic() as conn:
        if kind < 0.6:
            stored = conn.execute(
                "INSERT INTO memories(agent_id, content, timestamp) VALUES (?, ?, '') RETURNING id",
                (agent, text),
            ).fetchall()[0][0]
        elif kind < 0.75:
            conn.execute(
                "INSERT INTO episodes(agent_id, summary, keywords) VALUES (?, ?, ?)",
                (agent, text, rng.choice(WORDS)),
            )
            stored = None
        elif kind < 0.9:
            conn.execute(
                "UPDATE memories SET content = ? WHERE id = (SELECT id FROM memories "
                "ORDER BY random() LIMIT 1)",
                (text,),
            )
            stored = None
        else:
            conn.execute(
                "DELETE FROM memories WHERE id = "
                "(SELECT id FROM memories ORDER BY random() LIMIT 1)"
            )
            stored = None
    if stored is not None:
        print(f"stored {stored}", flush=True)
    if step >= 5 and PAUSE == "mid_append":
        os.environ["FTS_ARMED"] = "1"
    for index in indexes.values():
        index.sync()
    if step % 10 == 0:
        q = " ".join(rng.choice(WORDS) for _ in range(3))
        for table, index in indexes.items():
            with db.atomic():  # one state of the database for both answers
                got, want = (
                    indexed(index, q, scope(agent), 10),
                    oracle(db, table, q, scope(agent), 10),
                )
            if got != want:
                print(f"mismatch {table} {q!r} {got} {want}", flush=True)
print("done", flush=True)
