"""A writer process for the crash tests: `python vecindex_writer.py DB SEED OPS`.

Opens an Engine on the file database with the hashing embedder and stores, updates, deletes
and archives in a loop, printing one line per step, flushed:

    deleting <id>           before a delete is attempted (it may commit even if we die next)
    stored <id> / updated <id> / deleted <id> / archived <id>    once acknowledged

`VECTEST_PAUSE` makes the process announce `PAUSE <point>` and sleep (the test kills it there)
the `VECTEST_PAUSE_AT`-th time (default 1) it reaches the point:

    after_commit  in the post-write hook: the row is committed, the index not yet updated
    mid_apply     after the first row of a sync was applied: the file is marked dirty
    mid_grow      just before the file grows (dirty, some rows applied)
    mid_rebuild   during a rebuild, with the temporary file half written

`VECTEST_HEADROOM` shrinks the index's spare slots so that writes grow and compact the file.
"""

from __future__ import annotations

import os
import random
import sys
import time

import cpersona.vectors.format as fmt
import cpersona.vectors.index as ix
from cpersona.config import Settings
from cpersona.embedding.hashing import HashingProvider
from cpersona.engine import Engine

PAUSE = os.environ.get("VECTEST_PAUSE", "")
PAUSE_AT = int(os.environ.get("VECTEST_PAUSE_AT", "1"))
reached = 0


def hold(point: str) -> None:
    global reached
    if point != PAUSE:
        return
    reached += 1
    if reached == PAUSE_AT:
        print(f"PAUSE {point}", flush=True)
        time.sleep(120)  # killed here; the sleep only bounds a test that forgot to
        sys.exit(3)


def install_pause_points(engine: Engine) -> None:
    if PAUSE == "after_commit":
        after = engine.writer._after_write
        assert after is not None

        def slow_after_write() -> None:
            hold("after_commit")
            after()

        engine.writer._after_write = slow_after_write
    elif PAUSE == "mid_apply":
        apply_row = ix.VectorIndex._apply_row

        def paused_apply_row(self, *args):  # type: ignore[no-untyped-def]
            writer = apply_row(self, *args)
            hold("mid_apply")
            return writer

        ix.VectorIndex._apply_row = paused_apply_row  # type: ignore[method-assign]
    elif PAUSE == "mid_grow":
        grow = fmt.VectorFileWriter.grow

        def paused_grow(self, new_capacity):  # type: ignore[no-untyped-def]
            hold("mid_grow")
            return grow(self, new_capacity)

        fmt.VectorFileWriter.grow = paused_grow  # type: ignore[method-assign]
    elif PAUSE == "mid_rebuild":
        iter_rows = ix.vector_sql.iter_rows

        def paused_iter_rows(db, table):  # type: ignore[no-untyped-def]
            for n, row in enumerate(iter_rows(db, table)):
                if n == 2:
                    hold("mid_rebuild")
                yield row

        ix.vector_sql.iter_rows = paused_iter_rows


def main() -> None:
    db, seed, ops = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    if os.environ.get("VECTEST_HEADROOM"):
        ix.HEADROOM = int(os.environ["VECTEST_HEADROOM"])
    rng = random.Random(seed)
    engine = Engine(Settings(db_path=db, embedding_mode="hashing"), embedder=HashingProvider())
    install_pause_points(engine)
    w = engine.writer
    mine: list[tuple[int, str]] = []
    for i in range(ops):
        agent = rng.choice("ab")
        roll = rng.random()
        if roll < 0.6 or not mine:
            content = f"seed {seed} note {i} on {rng.choice(['tea', 'rust', 'sqlite', 'mmap'])}"
            out = w.store(
                agent,
                {"content": content, "source": {"id": f"s{i % 3}"}},
                rng.choice(["", "c1"]),
                rng.choice(["", "p1"]),
            )
            if out.get("result") == "stored":
                mine.append((out["id"], agent))
                print(f"stored {out['id']}", flush=True)
        elif roll < 0.75:
            row, owner = rng.choice(mine)
            out = w.update_memory(row, f"seed {seed} rewrite {i}", owner)
            if out.get("ok"):
                print(f"updated {row}", flush=True)
        elif roll < 0.9:
            row, owner = mine.pop(rng.randrange(len(mine)))
            print(f"deleting {row}", flush=True)
            out = w.delete_memory(row, owner)
            assert out["ok"], out
            print(f"deleted {row}", flush=True)
        else:
            out = w.archive_episode(agent, f"seed {seed} episode {i}", [], "", False, "", "")
            print(f"archived {out['episode_id']}", flush=True)
    print("done", flush=True)
    engine.close()


if __name__ == "__main__":
    main()
