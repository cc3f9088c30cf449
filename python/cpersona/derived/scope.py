"""A row's scope as both derived index files record it (vectors/format.py's sections,
fts/format.py's puts) and their searches ask for it: each of agent, project, channel and
source as a u64 hash (rust/scan.rs and rust/fts compare the hashes, never the texts)."""

from __future__ import annotations

import hashlib

#: The scope fields in the order both files store them: each value's `scope_hash`, the
#: source's 0 when the row has none.
SCOPE_FIELDS: tuple[tuple[str, str], ...] = (
    ("agent", "<u8"),
    ("project", "<u8"),
    ("channel", "<u8"),
    ("source", "<u8"),
)


def scope_hash(value: str) -> int:
    """The u64 scope hash of an agent, project, channel or source value.

    The first 8 bytes, little-endian, of ``blake2b(value, digest_size=8)``; 0 is reserved for
    "absent" (a source-less row), so a value that hashes to 0 maps to 1.
    """
    digest = hashlib.blake2b(value.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "little") or 1
