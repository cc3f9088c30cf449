"""A process that rebuilds one index file in the background and stops half way:
`python vecindex_rebuilder.py DB TABLE`.

It opens the database (every rebuild in the background, one row per step), starts the
rebuild of TABLE's vector index, and after two rows prints `HELD` and waits for a line on
stdin (the test kills it there, or writes `go`); then it finishes, prints `DONE <inode of the
installed file>` and exits.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import cpersona.derived.healing as healing
import cpersona.vectors.index as vector_index
from vecindex_support import new_engine

DB, TABLE = sys.argv[1], sys.argv[2]
healing.INLINE_ROWS = 0
healing.STEP_ROWS = 1
original = vector_index.append_row
written = [0]


def append_then_hold(*args: Any, **kwargs: Any) -> int:
    written[0] += 1
    if written[0] == 3:
        print("HELD", flush=True)
        sys.stdin.readline()
    return original(*args, **kwargs)


vector_index.append_row = append_then_hold
engine = new_engine(DB)
index = engine.indexes[TABLE]
assert not index.sync()  # the rebuild runs in the background
index.wait_for_healing()
print(f"DONE {os.stat(index.path).st_ino}", flush=True)
engine.close()
