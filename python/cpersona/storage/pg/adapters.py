"""psycopg adapters of a PgDatabase connection: Python str bound as `text`, and pgvector's
`vector` loaded as the little-endian float32 bytes SQLite stores (and dumped from the
database's vector parameter class)."""

from __future__ import annotations

import math
import struct
import sys
from array import array
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import psycopg


class VectorParam:
    """An embedding bound as a pgvector `vector` (see `PgDatabase.vector_param`)."""

    __slots__ = ("floats",)

    def __init__(self, floats: array) -> None:  # type: ignore[type-arg]
        self.floats = floats


def floats_of(blob: bytes | bytearray | memoryview) -> array | None:  # type: ignore[type-arg]
    """The float32 values of a little-endian BLOB, or None when it cannot be a vector (empty,
    not a whole number of float32s, or holding a NaN or an infinity)."""
    data = bytes(blob)
    if not data or len(data) % 4:
        return None
    values = array("f")
    values.frombytes(data)
    if sys.byteorder != "little":
        values.byteswap()
    return values if all(map(math.isfinite, values)) else None


def vector_param(blob: bytes | None) -> VectorParam | None:
    if blob is None:
        return None
    floats = floats_of(blob)
    return None if floats is None else VectorParam(floats)


def str_dumper() -> type:
    """Python str bound as `text` (not `unknown`): a parameter has a type, as in SQLite."""
    from psycopg.types.string import StrDumper

    return StrDumper


def register_vector(conn: psycopg.Connection[Any], oid: int, param: type) -> None:
    """Binary loader (vector -> little-endian float32 bytes) and dumper (VectorParam)."""
    from psycopg.adapt import Dumper, Loader
    from psycopg.pq import Format

    big_endian_host = sys.byteorder == "big"

    class VectorLoader(Loader):
        format = Format.BINARY

        def load(self, data: Any) -> bytes:
            # pgvector's binary form: int16 dim, int16 unused, dim big-endian float32s.
            values = array("f")
            values.frombytes(bytes(data[4:]))
            if not big_endian_host:
                values.byteswap()
            return values.tobytes()

    class VectorTextLoader(Loader):
        format = Format.TEXT

        def load(self, data: Any) -> bytes:
            text = bytes(data).decode()
            values = array("f", (float(x) for x in text.strip("[]").split(",") if x))
            if big_endian_host:
                values.byteswap()
            return values.tobytes()

    class VectorDumper(Dumper):
        format = Format.BINARY

        def dump(self, obj: Any) -> bytes:
            floats: array = obj.floats  # type: ignore[type-arg]
            out = array("f", floats)
            if not big_endian_host:
                out.byteswap()
            return struct.pack(">HH", len(out), 0) + out.tobytes()

    VectorDumper.oid = oid
    conn.adapters.register_loader(oid, VectorLoader)
    conn.adapters.register_loader(oid, VectorTextLoader)
    conn.adapters.register_dumper(param, VectorDumper)
