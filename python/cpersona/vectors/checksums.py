"""The content checksums of a vector index file: one u32 per slot, in a sidecar file.

The header of a vector file says whether its structure can be trusted; nothing in it says
whether the bytes of a slot are still the bytes its writer put there (issue 21: a vector body
overwritten in place changed answers while `cpersona index verify` saw the damage). So every
slot has a checksum, written by the writer when it writes the slot, and the scan checks each
slot it scores against it before the score counts (`rust/scan.rs`, `_fallback.vectors.VectorIndex`).

The checksum of a slot is the wrapping u32 sum of the little-endian 32-bit words of its vector
and of its `ids`, `keys`, `times`, `agent`, `project`, `channel` and `source` values (two words
each; `times` since version 2, the row instants of time-scoped recall):
exact and order-free, so numpy here and every Rust kernel compute the same value, and a change
of any one word changes it. The `flags` and `order` sections change in place (a delete sets a
flag) and are checked by structure instead (`order_problem`).

The sidecar is `<vector file>.sum` (docs/vector-index.md, "Content checksums"), kept out of the
vector file itself so that its layout stays as it was: a 64-byte header (magic `CPVECSM1`,
version, and the table, capacity and `db_uid` of the vector file it belongs to) and `capacity`
u32s. A vector file whose sidecar is missing or names another table, capacity or database is
rebuilt. A sidecar of another state of the same file (a crash between the two renames of a
rebuild; a copy of one file but not the other) names the same, so a new mapping checks every
slot against its checksum before it is used (`content_problem`): a mismatch is found
there, never trusted.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from cpersona import private_files
from cpersona.vectors.format import SECTIONS, Layout, VectorFileWriter

MAGIC = b"CPVECSM1"
VERSION = 2
HEADER_LEN = 64
_HEADER = np.dtype(
    [
        ("magic", "S8"),
        ("version", "<u4"),
        ("table", "<u4"),
        ("capacity", "<u8"),
        ("db_uid", "V16"),
    ]
)
#: The sections a slot's checksum covers: every word of its vector, then both words of each
#: other value (`rust/scan.rs` declares the same as `CHECKSUMMED`; a test holds them equal).
CHECKSUMMED = ("vectors", "ids", "keys", "times", "agent", "project", "channel", "source")


def sums_path(vector_path: str | os.PathLike[str]) -> Path:
    """The sidecar of the vector file at `vector_path`."""
    return Path(f"{os.fspath(vector_path)}.sum")


def slot_sums(views: dict[str, Any], slots: np.ndarray | slice) -> np.ndarray:
    """The checksums (uint32) of `slots` of a file whose sections are `views` (capacity-long
    arrays, as `VectorFileWriter.sections` or `_fallback.vectors.VectorIndex._views` hold them).
    A slice reads the mapping in place; an index array gathers."""
    # uint32 arithmetic wraps, and wrapping addition is associative: numpy's pairwise sums
    # give the same value as the kernels' running sum.
    vectors, *values = CHECKSUMMED
    total: np.ndarray = views[vectors][slots].view("<u4").sum(axis=1, dtype=np.uint32)
    for name in values:
        words = views[name][slots].view("<u4")
        total += words[0::2]
        total += words[1::2]
    return total


def order_problem(order: np.ndarray, count: int) -> str:
    """Why `order[:count]` is not a permutation of the slots in use ("" when it is)."""
    seen = np.bincount(order[:count].astype(np.int64), minlength=count)
    if seen.shape[0] != count or not np.all(seen == 1):
        return "its scan order lists a slot twice"
    return ""


def write(writer: VectorFileWriter) -> None:
    """Writes the sidecar of `writer`'s file from the slots as they are now (after a rebuild
    or a growth), through a temporary renamed over the old sidecar."""
    path = sums_path(writer.path)
    tmp = path.with_name(path.name + ".new")
    count = writer.count
    header = np.zeros((), dtype=_HEADER)
    header["magic"], header["version"] = MAGIC, VERSION
    fixed = writer.header()
    header["table"], header["capacity"] = fixed.table, fixed.capacity
    header["db_uid"] = np.void(fixed.db_uid)
    body = np.zeros(writer.capacity, dtype="<u4")
    body[:count] = slot_sums(writer.sections, slice(0, count))
    try:
        with os.fdopen(private_files.recreate(tmp), "wb") as f:
            f.write(header.tobytes().ljust(HEADER_LEN, b"\0"))
            f.write(body.tobytes())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def problem(vector_path: Path, table: int, capacity: int, db_uid: bytes) -> str:
    """Why the sidecar cannot vouch for the vector file with these fixed header fields ("" =
    it may: the slots are checked against it when the file is mapped), with plain reads."""
    path = sums_path(vector_path)
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            raw = f.read(HEADER_LEN)
    except FileNotFoundError:
        return "its content checksums are missing"
    except OSError as exc:
        return f"its content checksums are unreadable ({exc})"
    if len(raw) < HEADER_LEN:
        return "its content checksums are truncated"
    header = np.frombuffer(raw[: _HEADER.itemsize], dtype=_HEADER)[0]
    if bytes(header["magic"]) != MAGIC or int(header["version"]) != VERSION:
        return "its content checksums are not a cpersona checksum file"
    if (int(header["table"]), int(header["capacity"])) != (table, capacity) or bytes(
        header["db_uid"]
    ) != bytes(db_uid):
        return "its content checksums belong to another file"
    if size != HEADER_LEN + 4 * capacity:
        return "its content checksums are truncated"
    return ""


def open_read(vector_path: Path, capacity: int) -> np.ndarray:
    """A read-only mapping of the checksums (uint32, `capacity` long); the caller has checked
    `problem` under the lock it holds while it uses the mapping."""
    if capacity == 0:
        return np.zeros(0, dtype="<u4")
    return np.memmap(
        sums_path(vector_path), dtype="<u4", mode="r", offset=HEADER_LEN, shape=(capacity,)
    )


class SumWriter:
    """Keeps the sidecar of one open `VectorFileWriter` in step with the slots it appends."""

    def __init__(self, writer: VectorFileWriter) -> None:
        self.writer = writer
        self._map()

    def _map(self) -> None:
        capacity = self.writer.capacity
        self._sums: np.ndarray | None = None
        if capacity:
            self._sums = np.memmap(
                sums_path(self.writer.path),
                dtype="<u4",
                mode="r+",
                offset=HEADER_LEN,
                shape=(capacity,),
            )

    def record(self, slot: int) -> None:
        """Stores the checksum of `slot` as the writer has just written it."""
        assert self._sums is not None
        self._sums[slot] = slot_sums(self.writer.sections, np.array([slot]))[0]

    def regrown(self) -> None:
        """After `writer.grow` (a new file of a larger capacity): a new sidecar for it."""
        self._sums = None
        write(self.writer)
        self._map()

    def release(self) -> None:
        self._sums = None


def content_problem(path: Path, dim: int, capacity: int, count: int, sums: np.ndarray) -> str:
    """Why the slots of the file at `path` do not match their checksums, or its scan order is
    no permutation ("" when both hold): the check of a new mapping, in numpy over a read-only
    mapping of the file, `count` slots."""
    if count == 0:
        return ""
    layout = Layout.of(dim, capacity)
    mm = np.memmap(path, dtype=np.uint8, mode="r", shape=(layout.file_len,))
    views: dict[str, Any] = {}
    for name, dtype in SECTIONS:
        shape = (capacity, dim) if name == "vectors" else (capacity,)
        views[name] = np.ndarray(shape, dtype=dtype, buffer=mm, offset=layout.offsets[name])
    problem = order_problem(views["order"], count)
    if problem:
        return problem
    wrong = np.flatnonzero(slot_sums(views, slice(0, count)) != sums[:count])
    if wrong.shape[0]:
        first = int(views["ids"][int(wrong[0])])
        return f"the content checksums of {wrong.shape[0]} slots differ (row {first} first)"
    return ""
