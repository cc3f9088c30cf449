"""The full-text index file: a header and an append-only area of change records.

The layout is docs/fts-index.md. The change records are declared here once for Python
(`RECORD_LENGTH`, `OP_PUT`, `OP_DELETE`, `PUT_FIELDS`, `COLUMN_LENGTH`, `DELETE_FIELDS`; the
writer's structs are built from them) and once for Rust, as the tables `rust/fts/index.rs`
parses them by; `tests/kernels/test_kernels_layout.py` holds the two equal through
`_core.layout()`. The header is read and written by Python only.
"""

from __future__ import annotations

import functools
import os
import struct
from collections.abc import Iterable
from dataclasses import dataclass

from cpersona.storage.fulltext import FtsRow
from cpersona.vectors import format as vector_format

#: Scope values repeat across rows (agents, projects, channels): hash each once.
_scope_hash = functools.lru_cache(maxsize=65536)(vector_format.scope_hash)

MAGIC = b"CPFTSIX1"
#: 2 added each put's `time` (the row's instant key); a file of another version is rebuilt.
VERSION = 2
HEADER_LEN = 128
TABLE_CODES = {"memories": 0, "episodes": 1}
# magic, version, table, applied_seq, db_uid, dirty, generation, end, records, live
_HEADER = struct.Struct("<8sIIq16sIIQQQ")

#: Each record is its body's length, then the body: a put's or a delete's fields in order.
RECORD_LENGTH = "<u4"
OP_PUT = 1
OP_DELETE = 2
#: A put's fixed fields; `columns` texts follow, each a `COLUMN_LENGTH` byte count, then UTF-8.
PUT_FIELDS: tuple[tuple[str, str], ...] = (
    ("op", "|u1"),
    ("id", "<i8"),
    ("agent", "<u8"),
    ("project", "<u8"),
    ("channel", "<u8"),
    ("source", "<u8"),
    ("key", "<i8"),
    ("time", "<i8"),
    ("columns", "|u1"),
)
COLUMN_LENGTH = "<u4"
DELETE_FIELDS: tuple[tuple[str, str], ...] = (("op", "|u1"), ("id", "<i8"))

#: struct's letter for each little-endian dtype the declarations use.
_STRUCT_CODES = {"|u1": "B", "<u4": "I", "<i8": "q", "<u8": "Q"}


def _struct(*dtypes: str) -> struct.Struct:
    return struct.Struct("<" + "".join(_STRUCT_CODES[d] for d in dtypes))


_PUT = _struct(*(dtype for _, dtype in PUT_FIELDS))
_DELETE = _struct(*(dtype for _, dtype in DELETE_FIELDS))
_LENGTH = _struct(RECORD_LENGTH)
_COLUMN_LENGTH = _struct(COLUMN_LENGTH)
OFF_DIRTY = 40


@dataclass(frozen=True, slots=True)
class Header:
    magic: bytes
    version: int
    table: int
    applied_seq: int
    db_uid: bytes
    dirty: int
    generation: int
    end: int
    records: int
    live: int

    def pack(self) -> bytes:
        raw = _HEADER.pack(
            self.magic,
            self.version,
            self.table,
            self.applied_seq,
            self.db_uid,
            self.dirty,
            self.generation,
            self.end,
            self.records,
            self.live,
        )
        return raw + bytes(HEADER_LEN - len(raw))

    @classmethod
    def unpack(cls, raw: bytes) -> Header:
        f = _HEADER.unpack_from(raw)
        return cls(*f)

    @classmethod
    def new(cls, table: str, db_uid: bytes) -> Header:
        # A fresh generation per rebuild: a process that read an older file never mistakes a
        # new one that reuses its inode number for the file it knows.
        generation = int.from_bytes(os.urandom(4), "little")
        return cls(MAGIC, VERSION, TABLE_CODES[table], 0, db_uid, 1, generation, HEADER_LEN, 0, 0)


def put_record(row: FtsRow) -> bytes:
    texts = [c.encode("utf-8") for c in row.columns]
    body = _PUT.pack(
        OP_PUT,
        row.id,
        _scope_hash(row.agent_id),
        _scope_hash(row.project_id),
        _scope_hash(row.channel),
        0 if row.source_id is None else _scope_hash(row.source_id),
        row.key,
        row.time,
        len(texts),
    ) + b"".join(_COLUMN_LENGTH.pack(len(t)) + t for t in texts)
    return _LENGTH.pack(len(body)) + body


def delete_record(row_id: int) -> bytes:
    body = _DELETE.pack(OP_DELETE, row_id)
    return _LENGTH.pack(len(body)) + body


def records_for(row_ids: Iterable[int], rows: dict[int, FtsRow]) -> bytes:
    """A put for each id whose row exists, else a delete, in the order given."""
    out = []
    for row_id in row_ids:
        row = rows.get(row_id)
        out.append(delete_record(row_id) if row is None else put_record(row))
    return b"".join(out)


def read_header(fd: int) -> Header | None:
    raw = os.pread(fd, HEADER_LEN, 0)
    return Header.unpack(raw) if len(raw) == HEADER_LEN else None
