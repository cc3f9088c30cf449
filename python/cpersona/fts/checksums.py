"""The checksum of a full-text index file's records, in a sidecar `<file>.sum`.

The records of a `.fts` file are read once per process and then only their new tail, so what
the file holds is checked where it is read: a CRC-32 of the record area, from offset 128 to the
header's `end`, extended record batch by record batch as writers append (the CRC of a prefix
extends to the CRC of the whole, so a reader that knows the CRC up to where it stopped checks
the tail it reads without rereading the rest). Records whose text was overwritten in place
still parse; without this they were loaded as they are and searched (issue 21).

The sidecar is 32 bytes (docs/fts-index.md, "Content checksum"): magic `CPFTSSM1`, version
u32, the file's `generation` u32, the `end` u64 the CRC covers, the CRC u32, 4 zero bytes.
It is written after the header under the exclusive lock, in place (one `pwrite`, so a reader
never sees half of it); a sidecar that names another generation or end than the header, or is
missing, makes the file untrusted, and it is rebuilt.
"""

from __future__ import annotations

import os
import struct
import zlib
from pathlib import Path

from cpersona import private_files

MAGIC = b"CPFTSSM1"
VERSION = 1
_SIDE = struct.Struct("<8sIIQII")
#: The problem that is damage to the records themselves (rebuilt in the background), not to
#: the file's bookkeeping (rebuilt at once, as a truncated file is).
DAMAGED = "its records do not match their checksum (changed after they were written)"


def sums_path(path: str | os.PathLike[str]) -> Path:
    return Path(f"{os.fspath(path)}.sum")


def extend(crc: int, data: bytes) -> int:
    """The CRC of the records so far followed by `data` (0 is the CRC of no records)."""
    return zlib.crc32(data, crc)


def read(path: Path) -> tuple[int, int, int] | None:
    """(generation, end, crc) of the sidecar of the file at `path`, None if it has none."""
    try:
        with open(sums_path(path), "rb") as f:
            raw = f.read(_SIDE.size)
    except OSError:
        return None
    if len(raw) != _SIDE.size:
        return None
    magic, version, generation, end, crc, _ = _SIDE.unpack(raw)
    if magic != MAGIC or version != VERSION:
        return None
    return generation, end, crc


def write(path: Path, generation: int, end: int, crc: int, *, fresh: bool = False) -> None:
    """Record that the records of the file at `path` up to `end` have CRC `crc`. `fresh`: a
    new file (a rebuild's temporary), created whole; otherwise the sidecar is rewritten in
    place."""
    raw = _SIDE.pack(MAGIC, VERSION, generation, end, crc, 0)
    side = sums_path(path)
    fd = private_files.recreate(side) if fresh else private_files.open_or_create(side, os.O_WRONLY)
    try:
        os.pwrite(fd, raw, 0)
    finally:
        os.close(fd)


def problem(path: Path, generation: int, end: int, crc: int) -> str:
    """Why the records read (ending at `end`, CRC `crc`) cannot be trusted ("" = they can)."""
    side = read(path)
    if side is None:
        return "its records have no checksum"
    if side[:2] != (generation, end):
        return "its checksum belongs to another state of the file"
    if side[2] != crc:
        return DAMAGED
    return ""


def remove_with_sum(path: Path) -> None:
    """Remove a file (a rebuild's temporary) and its sidecar."""
    path.unlink(missing_ok=True)
    sums_path(path).unlink(missing_ok=True)
