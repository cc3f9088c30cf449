"""How one SQLite row becomes a slot of a vector index file, and back: the writer-side steps
that the sync, the rebuilds (`index.py`) and `verify` share."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from cpersona.derived.scope import scope_hash
from cpersona.storage.embeddings import IndexRow
from cpersona.vectors import checksums
from cpersona.vectors.format import (
    FLAG_DELETED,
    TABLE_EPISODES,
    TABLE_MEMORIES,
    VectorFileWriter,
)

#: The header's table code of each table an index file may hold.
TABLE_CODES = {"memories": TABLE_MEMORIES, "episodes": TABLE_EPISODES}
#: Slots allocated by a rebuild beyond the rows it writes, so the next writes need no growth.
HEADROOM = 1024


def _vector(embedding: bytes) -> np.ndarray:
    """A row's BLOB as float32; one that is not whole floats gives an empty (foreign) vector."""
    if len(embedding) % 4:
        return np.empty(0, dtype="<f4")
    return np.frombuffer(embedding, dtype="<f4")


def append_row(
    writer: VectorFileWriter,
    row: IndexRow,
    headroom: int,
    sums: checksums.SumWriter | None = None,
) -> int:
    """Append `row`, growing the file by at least `headroom` slots when it is full; with
    `sums`, record its checksum (a rebuild writes them all at the end)."""
    if writer.count >= writer.capacity:  # a rebuild also grows: rows may arrive after its count
        writer.grow(max(2 * writer.capacity, writer.capacity + headroom))
        if sums is not None:
            sums.regrown()
    vector = _vector(row.embedding)
    slot = writer.append(
        row.id,
        row.key,
        time=row.time,
        agent=scope_hash(row.agent_id),
        project=scope_hash(row.project_id),
        channel=scope_hash(row.channel),
        source=0 if row.source_id is None else scope_hash(row.source_id),
        vector=vector,
    )
    if sums is not None:
        sums.record(slot)
    return slot


def live_slots(writer: VectorFileWriter, row_ids: list[int]) -> dict[int, int]:
    """The live slot of each of `row_ids` that has one. Vectorised over the file: a write
    touches a few rows, and a dict of every slot made each write cost O(rows) in Python.

    A few ids take one comparison pass over the ids each, and the flags are read only at the
    matches: `np.isin` with a live mask made three passes and temporaries over every slot,
    0.53 ms over 237,654 slots where one pass costs 0.03 ms (docs/performance.md).
    """
    ids = writer.view("ids")
    if len(row_ids) <= _FEW_IDS:
        hits = [np.flatnonzero(ids == row_id) for row_id in row_ids]
        found = np.sort(np.concatenate(hits)) if hits else np.empty(0, np.int64)
    else:
        found = np.flatnonzero(np.isin(ids, np.asarray(row_ids, dtype=np.int64)))
    flags = writer.view("flags")
    return {int(ids[s]): int(s) for s in found if not flags[s] & FLAG_DELETED}


#: Up to this many changed rows, `live_slots` compares ids one by one rather than `np.isin`.
_FEW_IDS = 8


def compare_slot(writer: VectorFileWriter, slot: int, row: IndexRow, table: str) -> list[str]:
    out: list[str] = []
    expect = {
        "keys": row.key,
        "times": row.time,
        "agent": scope_hash(row.agent_id),
        "project": scope_hash(row.project_id),
        "channel": scope_hash(row.channel),
        "source": 0 if row.source_id is None else scope_hash(row.source_id),
    }
    for section, value in expect.items():
        if int(writer.view(section)[slot]) != value:
            out.append(f"{table} {row.id}: {section} differs")
    vector = _vector(row.embedding)
    if vector.shape == (writer.dim,):
        if not np.array_equal(writer.view("vectors")[slot], vector):
            out.append(f"{table} {row.id}: vector differs")
    elif not writer.view("flags")[slot] & 2:
        out.append(f"{table} {row.id}: foreign-width row not flagged")
    return out


def release(writer: VectorFileWriter) -> None:
    """Drop a writer's mapping without msync: a kill keeps the page cache, and the file is
    derived (a torn write after power loss is caught by `verify` and rebuilt)."""
    for attr in ("_views", "_hdr", "_mm"):
        if hasattr(writer, attr):
            delattr(writer, attr)


@dataclass(frozen=True, slots=True)
class Shape:
    """What a file built from the database is sized for: the log position it has applied,
    the embedded rows, their modal width (None: no BLOB is a vector)."""

    log_seq: int
    total: int
    dim: int | None


def file_key(path: Path, dim: int, capacity: int) -> tuple[int, ...]:
    """What a kept mapping of the file at `path` and of its sidecar is valid for: both files'
    identity and size, and the header's fixed fields (`dim`, `capacity`). As for the readers'
    `VectorIndex.kernel_handle`: a file changes in place only by a sync under the exclusive
    lock (slots appended or flagged, header counters), which a kept mapping sees live; a
    rebuild, a growth or a new sidecar renames a new file in (a new inode), and nothing
    overwrites an index file in place (bundles and migrations unlink it)."""
    st, sums = os.stat(path), os.stat(checksums.sums_path(path))
    return (st.st_dev, st.st_ino, st.st_size, sums.st_ino, sums.st_size, dim, capacity)


@dataclass(eq=False)
class KeptWriter:
    """A sync's writer and sidecar writer of one file, kept mapped between syncs.

    Mapping the file anew for each sync cost more than the append itself at 1,000,000 rows
    (docs/performance.md, "Store at 1M"): the 1.6 GB mapping made and unmade, every page of the
    scan order faulted in again when the append shifts it, and a pass over `order` to check it
    (done here once per mapping, as the readers' `kernel_handle` does). The owner reuses it
    only while `key` (`file_key`) still matches under the exclusive lock, and re-keys it after
    each apply (a growth remaps both files).
    """

    writer: VectorFileWriter
    sums: checksums.SumWriter
    key: tuple[int, ...]
    #: `max_id` is the largest row id among slots [0, seen) (-1: none yet).
    seen: int = field(default=0)
    max_id: int = field(default=-1)

    def live_slots(self, row_ids: list[int]) -> dict[int, int]:
        """`live_slots(self.writer, row_ids)`, skipping the pass over the ids for rows above
        every slot's id (an inserted row's: most writes). Exact because a slot's id never
        changes in a file (slots are appended, flagged deleted, or the file is replaced by a
        new one), so the largest id is kept up to date from the slots appended since (by any
        process: `count` is read from the mapped header)."""
        ids = self.writer.view("ids")
        count = ids.shape[0]
        if count < self.seen:  # not a file this mapping has seen grow: count afresh
            self.seen, self.max_id = 0, -1
        if count > self.seen:
            self.max_id = max(self.max_id, int(ids[self.seen : count].max()))
            self.seen = count
        known = [row_id for row_id in row_ids if row_id <= self.max_id]
        return live_slots(self.writer, known) if known else {}

    def release(self) -> None:
        self.sums.release()
        release(self.writer)
