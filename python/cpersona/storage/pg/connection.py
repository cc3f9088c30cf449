"""One pooled psycopg connection as the sqlite3.Connection subset storage uses (`PgConnection`,
`PgCursor`, `Row`), the mapping of psycopg's errors onto the classes callers handle, and the
redaction of a database URL for messages. PgDatabase (db.py) owns the pool and transactions."""

from __future__ import annotations

import contextlib
import re
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from functools import lru_cache
from typing import TYPE_CHECKING, Any, ClassVar
from urllib.parse import urlsplit

from cpersona.storage.interface import Row as AnyRow
from cpersona.storage.ops import POSTGRES, SqlOps
from cpersona.storage.pg.adapters import VectorParam
from cpersona.storage.pg.adapters import vector_param as _vector_param
from cpersona.storage.pg.dialect import placeholders
from cpersona.storage.pg.reach import is_connection_failure

if TYPE_CHECKING:
    import psycopg

Tracer = Callable[[str, Any], None]
#: One statement: portable SQL (`?` placeholders) and its parameters.
Statement = tuple[str, Sequence[Any]]
#: How the trace shows a statement sent in the round trip of the one before it.
PIPELINED = "/* pipelined */"
#: Turns an error that lost a connection into the error to raise (Reach.lost of its pool).
OnLost = Callable[[BaseException], Exception]


def redact(url: str) -> str:
    """`url` with any password removed (for messages and logs); a libpq keyword string
    (`host=... password=...`) has its password value replaced."""
    if "://" not in url:
        return re.sub(r"(?i)(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)", r"\1***", url)
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparsable database URL>"
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, host = netloc.rsplit("@", 1)
        user = userinfo.split(":", 1)[0]
        netloc = f"{user}@{host}" if user else host
    query = re.sub(r"(?i)(^|&)(password=)[^&]*", r"\1\2***", parts.query)
    if (netloc, query) == (parts.netloc, parts.query):
        return url
    out = f"{parts.scheme}://{netloc}{parts.path}"
    return out + (f"?{query}" if query else "") + (f"#{parts.fragment}" if parts.fragment else "")


class Row(tuple):  # type: ignore[type-arg]
    """A result row: `row[0]`, `row["col"]` (case-insensitive, like sqlite3.Row), `tuple(row)`.

    Each set of column names has its own subclass holding the name index (`row_class`), so a
    row is a bare tuple (no per-row dict) and a statement's rows cost one C call each."""

    __slots__ = ()
    _index: ClassVar[dict[str, int]] = {}

    def __getitem__(self, key: Any) -> Any:
        if key.__class__ is str:
            try:
                return tuple.__getitem__(self, self._index[key.lower()])
            except KeyError:
                raise IndexError(f"no such column: {key}") from None
        return tuple.__getitem__(self, key)

    def keys(self) -> list[str]:
        return list(self._index)


@lru_cache(maxsize=1024)
def row_class(names: tuple[str, ...]) -> type[Row]:
    """The Row subclass of one list of column names (the first of equal names wins)."""
    index: dict[str, int] = {}
    for i, name in enumerate(names):
        index.setdefault(name.lower(), i)
    return type("Row", (Row,), {"__slots__": (), "_index": index})


def row_maker(names: Sequence[str]) -> Callable[[Sequence[Any]], Row]:
    return row_class(tuple(names))


@lru_cache(maxsize=1024)
def _row_class_of(names: tuple[bytes, ...]) -> type[Row]:
    return row_class(tuple(n.decode() for n in names))


class PgCursor:
    """The results of one statement, already fetched."""

    def __init__(self, rows: list[AnyRow], rowcount: int, lastrowid: int | None) -> None:
        self._rows = rows
        self._pos = 0
        self.rowcount = rowcount
        self.lastrowid = lastrowid

    def fetchone(self) -> AnyRow | None:
        if self._pos >= len(self._rows):
            return None
        row = self._rows[self._pos]
        self._pos += 1
        return row

    def fetchmany(self, size: int = 1) -> list[AnyRow]:
        out = self._rows[self._pos : self._pos + size]
        self._pos += len(out)
        return out

    def fetchall(self) -> list[AnyRow]:
        out = self._rows[self._pos :]
        self._pos = len(self._rows)
        return out

    def __iter__(self) -> Iterator[AnyRow]:
        while (row := self.fetchone()) is not None:
            yield row


class PgConnection:
    """One pooled psycopg connection behind the sqlite3.Connection subset storage uses."""

    dialect = "postgresql"
    ops: SqlOps = POSTGRES

    def __init__(
        self, conn: psycopg.Connection[Any], tracer: Tracer | None, on_lost: OnLost | None = None
    ) -> None:
        self.raw = conn
        self._tracer = tracer
        self._on_lost = on_lost

    @property
    def in_transaction(self) -> bool:
        from psycopg.pq import TransactionStatus

        return self.raw.info.transaction_status != TransactionStatus.IDLE

    def execute(self, sql: str, params: Sequence[Any] = ()) -> PgCursor:
        """Run one storage statement (portable SQL, `?` placeholders)."""
        return self._run(placeholders(sql), tuple(params), returns_id=False)

    def execute_raw(self, sql: str, params: Sequence[Any] | None = None) -> PgCursor:
        """Run one statement written for PostgreSQL (schema, locks)."""
        return self._run(sql, None if params is None else tuple(params), returns_id=False)

    def vector_param(self, blob: bytes | None) -> VectorParam | None:
        """As `PgDatabase.vector_param` (storage functions that take a connection)."""
        return _vector_param(blob)

    def begin(self, begin: str, reads: Sequence[Statement] = ()) -> list[PgCursor]:
        """Open a transaction with `begin` and run `reads` (portable SQL and parameters) in
        it, in one round trip: psycopg's pipeline mode sends them all before it waits (the
        reads a snapshot asks first: storage/pg/snapshot_reads.py). Their results, in order."""
        if not reads:
            self._run(begin, None, returns_id=False)
            return []
        if self._tracer is not None:
            self._tracer(begin, None)
            for sql, params in reads:  # marked: the trace counts round trips (pg_statements)
                self._tracer(f"{PIPELINED} {sql}", params)
        try:
            with self.raw.pipeline():
                self.raw.execute(begin)
                cursors = [
                    self.raw.execute(placeholders(sql), tuple(params), binary=True)
                    for sql, params in reads
                ]
            return [PgCursor(self._rows(cur), cur.rowcount, None) for cur in cursors]
        except Exception as exc:
            if self.raw.pgconn.pipeline_status:
                # Still in pipeline mode ("cannot exit pipeline mode while busy": the server
                # went away with results owed, as in a restart): its state is unknown, so it
                # is closed, which makes this a lost connection (the pool drops it).
                with contextlib.suppress(Exception):
                    self.raw.close()
            raise self._failure(exc) from exc

    def _run(self, sql: str, params: tuple[Any, ...] | None, *, returns_id: bool) -> PgCursor:
        if self._tracer is not None:
            self._tracer(sql, params)
        try:
            cur = self.raw.execute(sql, params, binary=True)
            rows = self._rows(cur)
        except Exception as exc:
            raise self._failure(exc) from exc
        if returns_id:
            lastrowid = int(rows[0][0]) if len(rows) == 1 else None
            return PgCursor([], cur.rowcount, lastrowid)
        return PgCursor(rows, cur.rowcount, None)

    @staticmethod
    def _rows(cur: psycopg.Cursor[Any]) -> list[AnyRow]:
        res = cur.pgresult
        if res is None or cur.description is None:
            return []
        # The names straight from the result (bytes), not `description`: that builds a Column
        # object per column on every statement (7 us against 0.5 us for a hydration's 8).
        names = tuple([res.fname(i) or b"" for i in range(res.nfields)])
        return list(map(_row_class_of(names), cur.fetchall()))

    def _failure(self, exc: Exception) -> Exception:
        """The error to raise for `exc`: the pool's verdict on a lost connection, else the
        sqlite3 class callers handle."""
        if self._on_lost is not None and is_connection_failure(exc, self.raw):
            return self._on_lost(exc)
        return _mapped(exc)


def _mapped(exc: Exception) -> Exception:
    """psycopg's error as the sqlite3 class callers already handle (a unique violation is an
    IntegrityError on both backends), its message kept."""
    import psycopg

    if not isinstance(exc, psycopg.Error):
        return exc
    message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if isinstance(exc, psycopg.IntegrityError):
        return sqlite3.IntegrityError(message)
    if isinstance(exc, psycopg.OperationalError):
        return sqlite3.OperationalError(message)
    if isinstance(exc, psycopg.DataError | psycopg.ProgrammingError):
        return sqlite3.OperationalError(message)
    return sqlite3.DatabaseError(message)
