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

from cpersona.derived.scope import SCOPE_FIELDS, scope_hash
from cpersona.storage.fulltext import FtsRow

#: Scope values repeat across rows (agents, projects, channels): hash each once.
_scope_hash = functools.lru_cache(maxsize=65536)(scope_hash)

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
    *SCOPE_FIELDS,
    ("key", "<i8"),
    ("time", "<i8"),
    ("columns", "|u1"),
)
COLUMN_LENGTH = "<u4"
DELETE_FIELDS: tuple[tuple[str, str], ...] = (("op", "|u1"), ("id", "<i8"))

#: The postings segment (`<file>.seg`, fts/segment.py): written and read by the Rust core
#: (`rust/fts/segment.rs` declares it too; the layout test holds the two equal). Python reads
#: only `body_crc`'s place, to check and fill in the CRC-32 of the file.
SEGMENT_MAGIC = b"CPFTSSG1"
SEGMENT_VERSION = 1
SEGMENT_HEADER_LEN = 128
SEGMENT_HEADER: tuple[tuple[str, int, str], ...] = (
    ("magic", 0, "|S8"),
    ("version", 8, "<u4"),
    ("table", 12, "<u4"),
    ("generation", 16, "<u4"),  # the records file's
    ("body_crc", 20, "<u4"),  # CRC-32 of the file with this field read as zero
    ("end", 24, "<u8"),  # where the records the segment holds end
    ("records_crc", 32, "<u4"),  # CRC-32 of those records (the sidecar's, up to `end`)
    ("reserved0", 36, "|V4"),
    ("rows", 40, "<u8"),
    ("terms", 48, "<u8"),
    ("postings", 56, "<u8"),
    ("columns", 64, "<u8"),
    ("text_bytes", 72, "<u8"),
    ("total_tokens", 80, "<u8"),
    ("reserved", 88, "|V40"),
)
SEGMENT_SECTION_ALIGN = 8
#: After the header, in file order, each padded to `SEGMENT_SECTION_ALIGN`: (name, dtype, the
#: header count that sizes it). Rows are in ascending id order; a row's columns are
#: `column_start[r]..column_start[r + 1]`, a column's folded text
#: `text[column_offset[c]..column_offset[c + 1]]`, trigram `term_keys[t]`'s postings
#: `posting_start[t]..posting_start[t + 1]` of `posting_slots` / `posting_counts`.
SEGMENT_SECTIONS: tuple[tuple[str, str, str], ...] = (
    ("ids", "<i8", "Rows"),
    ("agents", "<u8", "Rows"),
    ("projects", "<u8", "Rows"),
    ("channels", "<u8", "Rows"),
    ("sources", "<u8", "Rows"),
    ("keys", "<i8", "Rows"),
    ("times", "<i8", "Rows"),
    ("sizes", "<u8", "Rows"),
    ("column_start", "<u8", "RowsPlusOne"),
    ("column_offset", "<u8", "ColumnsPlusOne"),
    ("text", "|u1", "TextBytes"),
    ("term_keys", "<u8", "Terms"),
    ("posting_start", "<u8", "TermsPlusOne"),
    ("posting_slots", "<u4", "Postings"),
    ("posting_counts", "|u1", "Postings"),
)

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
