"""PgDatabase: the Database API on PostgreSQL (psycopg 3, a psycopg_pool connection pool).

The public surface is `storage.db.Database`'s, so storage modules run unchanged: statements
are portable SQL with `?` placeholders, converted to psycopg's (`storage/pg/dialect.py`), the
fragments that differ asked of `ops` (storage/ops.py); rows answer
`row[0]`, `row["col"]` and `tuple(row)`, cursors have `fetchone/fetchall/fetchmany`,
`rowcount` and `lastrowid`.

Writes: `atomic()` takes one pooled connection for the thread and opens a transaction.
`atomic(exclusive=False)`, the write tools' (storage/writes.py), holds the maintenance lock
`WRITE_LOCK_KEY` SHARED (any number at once, on every server) and then only what its rows
need (storage/write_locks.py); `atomic()` (maintenance: imports, conversions, repairs) holds
it EXCLUSIVE and runs alone, like SQLite's BEGIN IMMEDIATE writer, behind a threading lock so
that waiting ones hold one pooled connection, not one each. Change-log entries may commit out
of seq order (followed by horizon: storage/pg/horizons.py). Nested `atomic()` = SAVEPOINT.

Reads: `reader()` is a per-thread facade that borrows a pooled connection per statement
(autocommit: each statement sees the newest commit, as an SQLite reader does); after an
explicit `BEGIN` it keeps one connection in a REPEATABLE READ READ ONLY transaction until
`COMMIT`, which is the snapshot SQLite's deferred read transaction gives. Results are fetched
whole before the connection goes back to the pool.

Connections: borrowed from the pool that `storage/pg/reach.py` keeps. A connection found
dead is never handed out again: the pool is replaced by a fresh one (or, when the server does
not answer, closed for the outage), and a statement of which nothing had run is retried once
on the new pool (an autocommit read, or the BEGIN of a transaction). Nothing is kept per
thread between calls but an open read transaction, and `release_reader()` (the end of each
tool call) ends even that.

Embeddings: `vector` values load as the little-endian float32 bytes SQLite stores; a write
passes `vector_param(blob)`.
"""

from __future__ import annotations

import contextlib
import logging
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Literal

from cpersona.storage.db import Statements, savepoint
from cpersona.storage.error_kinds import InDoubtError, UnreachableError
from cpersona.storage.interface import Capabilities
from cpersona.storage.ops import POSTGRES, SqlOps
from cpersona.storage.pg.adapters import VectorParam, register_vector, str_dumper
from cpersona.storage.pg.adapters import vector_param as _vector_param
from cpersona.storage.pg.connection import (
    PgConnection,
    PgCursor,
    Statement,
    Tracer,
    redact,
)
from cpersona.storage.pg.finisher import SnapshotFinisher
from cpersona.storage.pg.reach import (
    Counts,
    Reach,
    StaleConnection,
    connect_timeout_arg,
)

if TYPE_CHECKING:
    import psycopg
    import psycopg_pool

log = logging.getLogger("cpersona.storage")

#: The maintenance lock: "cpersona" in ASCII as a bigint. Write tools take it shared,
#: maintenance exclusive (the key of the global write lock before issue 19, so a server of an
#: older release, which takes it exclusive for every write, still excludes both).
WRITE_LOCK_KEY = 0x63706572736F6E61

#: An open transaction: the context that gives its connection back, the connection, and the
#: results of the reads sent with its BEGIN (`PgDatabase._begun`).
_Begun = tuple[contextlib.AbstractContextManager[PgConnection], PgConnection, list[PgCursor]]

#: The name (prefix) of the threads that open read snapshots for their callers.
OPENER_THREAD = "cpersona-pg-open"

#: How a read snapshot begins: the snapshot SQLite's deferred read transaction gives.
READ_SNAPSHOT = "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"


#: Seconds a connection attempt, or a wait for a pooled connection, may take by default
#: (CPERSONA_PG_CONNECT_TIMEOUT_SECONDS).
CONNECT_TIMEOUT = 5.0


class _Reader:
    """This thread's read facade over the pool (see the module docstring)."""

    dialect = "postgresql"
    ops: SqlOps = POSTGRES

    def __init__(self, db: PgDatabase) -> None:
        self._db = db
        self._pinned: PgConnection | None = None
        self._ctx: contextlib.AbstractContextManager[PgConnection] | None = None
        self._memo: dict[str, object] = {}
        #: Reads for the next BEGIN only (storage/pg/snapshot_reads.send_with_begin).
        self.next_begin: dict[str, Statement] = {}
        #: A snapshot being opened by the database's opener thread, and its reads' names.
        self._opening: tuple[Future[_Begun], tuple[str, ...]] | None = None

    @property
    def in_transaction(self) -> bool:
        return self._pinned is not None or self._opening is not None

    @property
    def opening(self) -> bool:
        """Whether this thread's snapshot is asked for and its BEGIN's answer not yet taken
        (what may run meanwhile without the database: vectors/search.py)."""
        return self._opening is not None

    @property
    def pinned(self) -> PgConnection | None:
        """The connection of the open read transaction (storage/pg/vectors.stream_rows)."""
        self._opened()
        return self._pinned

    @property
    def snapshot_memo(self) -> dict[str, object] | None:
        """What a caller learnt of the open read transaction's snapshot that cannot change
        before it ends (storage/pg/horizons.py: its bounds), None outside one."""
        self._opened()
        return self._memo if self._pinned is not None else None

    def _opened(self) -> None:
        """Take the answer of a BEGIN sent by the opener thread (its error, if it failed)."""
        if self._opening is None:
            return
        (future, names), self._opening = self._opening, None
        self._ctx, self._pinned, first = future.result()
        answers = zip(names, first, strict=True)
        self._memo = {f"read:{name}": cur.fetchall() for name, cur in answers}

    def execute(self, sql: str, params: Sequence[Any] = ()) -> PgCursor:
        verb = sql.strip().rstrip(";").strip().upper()
        if verb in ("BEGIN", "BEGIN DEFERRED"):
            if self.in_transaction:
                raise sqlite3.OperationalError("cannot start a transaction within a transaction")
            # db.snapshot_reads: one mapping, that others only ever replace.
            reads, self.next_begin = {**self._db.snapshot_reads, **self.next_begin}, {}
            statements = tuple(reads.values())
            if self._db.opener is not None:
                # Sent from the opener thread: the caller's next work that needs no database
                # (a recall's vector scans) runs during the round trip
                # (docs/notes/performance-notes.md).
                begun = self._db.opener.submit(self._db._begun, READ_SNAPSHOT, statements)
                self._opening = (begun, tuple(reads))
                return PgCursor([], -1, None)
            self._ctx, self._pinned, first = self._db._begun(READ_SNAPSHOT, statements)
            answers = zip(reads, first, strict=True)
            self._memo = {f"read:{name}": cur.fetchall() for name, cur in answers}
            return PgCursor([], -1, None)
        if verb in ("COMMIT", "END", "ROLLBACK"):
            self._opened()
            if self._pinned is None:
                raise sqlite3.OperationalError(f"cannot {verb.lower()} - no transaction is active")
            self.end("ROLLBACK" if verb == "ROLLBACK" else "COMMIT")
            return PgCursor([], -1, None)
        self._opened()
        if self._pinned is not None:
            try:
                return self._pinned.execute(sql, params)
            except sqlite3.Error:
                self._restart()
                raise
        try:
            with self._db._connection() as conn:
                return conn.execute(sql, params)
        except StaleConnection:  # the pool is a fresh one now; nothing of this read ran
            with self._db._connection() as conn:
                return conn.execute(sql, params)

    def _restart(self) -> None:
        """After a failed statement (it aborts PostgreSQL's transaction, not SQLite's): later
        statements (an arm's fallback) read a new snapshot, or none when that fails too."""
        pinned = self._pinned
        if pinned is None:
            return
        self._memo = {}
        try:
            pinned.execute_raw("ROLLBACK")
            pinned.execute_raw(READ_SNAPSHOT)
        except Exception:
            with contextlib.suppress(Exception):  # a dead connection: the pool drops it
                self.end()

    def read_with_begin(self, name: str, sql: str) -> None:
        """Send `sql` with every later snapshot's BEGIN (storage/pg/snapshot_reads.py)."""
        if name not in self._db.snapshot_reads:
            self._db.snapshot_reads = {**self._db.snapshot_reads, name: (sql, ())}

    def end(self, verb: str = "ROLLBACK") -> None:
        """End the pinned read transaction and give its connection back (a dead one is
        discarded by the pool)."""
        try:
            self._opened()
        except Exception:  # the BEGIN failed: no transaction; its connection went back
            self._pinned = self._ctx = None
            self._memo = {}
            if verb == "COMMIT":
                raise
            return
        pinned, ctx = self._pinned, self._ctx
        self._pinned = self._ctx = None
        self._memo = {}
        if pinned is None or ctx is None:
            return
        if verb == "COMMIT" and self._db.finisher is not None:
            self._db.finisher.end(pinned, ctx)
            return
        try:
            pinned.execute_raw(verb)
        finally:
            ctx.__exit__(None, None, None)


class PgDatabase(Statements):
    """One PostgreSQL database through a connection pool (see the module docstring)."""

    dialect: Literal["sqlite", "postgresql"] = "postgresql"
    #: The SQL fragments this backend spells its own way (storage/ops.py).
    ops: SqlOps = POSTGRES
    #: Whether text may hold U+0000 (PostgreSQL's text cannot; tools refuse it there).
    stores_nul = False
    capabilities: Capabilities

    def __init__(
        self,
        url: str,
        *,
        pool_size: int = 8,
        tracer: Tracer | None = None,
        read_only: bool = False,
        connect_timeout: float = CONNECT_TIMEOUT,
        vector_index: bool = False,
    ) -> None:
        """`vector_index`: the vector arm reads this host's index file (the caller checked
        that the Rust core and the cache directory allow it: engine.py)."""
        from cpersona.storage.pg import errors as pg_errors

        # A server that many hosts may share: each host keeps its own full-text index files
        # (there is no FTS5) in its cache directory, and its vector index files there too when
        # opened with `vector_index` (else vectors are scanned in the database, which is also
        # the fallback while a file is rebuilt: storage/database_scan.py).
        self.capabilities = Capabilities(
            vector_arm="index_file" if vector_index else "database",
            full_text_in_database=False,
            derived_files="host_cache",
            local_files=False,
            shared=True,
        )

        pg_errors.install()  # psycopg's errors as storage errors (storage/error_kinds.py)
        self.url = url
        self.path = redact(url)
        self.is_memory = False
        self.read_only = read_only
        self._tracer = tracer
        self._write_lock = threading.RLock()
        self._local = threading.local()
        self._closed = False
        self._vector_oid: int | None = None
        self._pool_size = pool_size
        self._connect_timeout = connect_timeout
        #: What every read snapshot asks first, sent with its BEGIN (storage/pg/snapshot_reads.py).
        self.snapshot_reads: dict[str, Statement] = {}
        # The pool is made on first use, after the schema exists: a connection learns the
        # `vector` type when it is made (`_configure`).
        self._reach = Reach(self.path, self._new_pool, self._probe)
        #: Ends read snapshots off the caller's path (storage/pg/finisher.py).
        self.finisher: SnapshotFinisher | None = SnapshotFinisher()
        #: Opens read snapshots off the caller's path (`_Reader.execute`): threads made on
        #: demand, at most one per pooled connection.
        self.opener: ThreadPoolExecutor | None = ThreadPoolExecutor(
            max_workers=pool_size, thread_name_prefix=OPENER_THREAD
        )
        try:
            self._probe()
        except Exception as exc:
            raise ConnectionFailed(f"cannot connect: {_first_line(exc)}") from None

    def _probe(self) -> None:
        """Open and close one connection (raises psycopg's error when the server refuses)."""
        import psycopg

        timeout = connect_timeout_arg(self._connect_timeout)
        psycopg.connect(self.url, autocommit=True, connect_timeout=timeout).close()

    def _new_pool(self) -> psycopg_pool.ConnectionPool[Any]:
        """An open pool with its first connection made (raises when it cannot be made in
        the connect timeout)."""
        import psycopg_pool

        connect_timeout = connect_timeout_arg(self._connect_timeout)
        pool: psycopg_pool.ConnectionPool[Any] = psycopg_pool.ConnectionPool(
            self.url,
            min_size=1,
            max_size=self._pool_size,
            kwargs={"autocommit": True, "connect_timeout": connect_timeout},
            configure=self._configure,
            timeout=self._connect_timeout,
            open=False,
            name="cpersona",
        )
        try:
            pool.open(wait=True, timeout=self._connect_timeout)
        except BaseException:
            pool.close(timeout=0)
            raise
        return pool

    @contextmanager
    def _connection(self) -> Iterator[PgConnection]:
        """A pooled connection for one statement or transaction, given back afterwards.

        Raises:
            UnreachableError: the server is unreachable (StaleConnection: a dead connection
                was met, the pool is a fresh one, nothing ran: the caller may retry once).
            BusyError: every pooled connection stayed in use for the connect timeout.
        """
        import psycopg_pool

        pool, generation = self._reach.pool()
        try:
            raw = pool.getconn()
        except psycopg_pool.PoolTimeout:
            raise self._reach.busy(generation, self._connect_timeout) from None
        except psycopg_pool.PoolClosed as exc:  # replaced meanwhile by another thread
            raise self._reach.lost(exc, generation) from None

        def on_lost(exc: BaseException) -> Exception:
            return self._reach.lost(exc, generation)

        try:
            yield PgConnection(raw, self._tracer, on_lost)
        finally:
            pool.putconn(raw)

    def _begun(self, begin: str, reads: Sequence[Statement] = ()) -> _Begun:
        """A pooled connection inside a transaction opened by `begin`, the context that gives
        it back and the results of `reads` run first in it (one round trip); retried once on a
        fresh pool when the first connection was dead."""
        for attempt in (1, 2):
            ctx = self._connection()
            conn = ctx.__enter__()
            try:
                first = conn.begin(begin, reads)
            except StaleConnection:
                ctx.__exit__(None, None, None)
                if attempt == 2:
                    raise
                continue
            except BaseException as exc:
                ctx.__exit__(type(exc), exc, exc.__traceback__)
                raise
            return ctx, conn, first
        raise AssertionError("unreachable")  # pragma: no cover

    def reachability(self) -> Counts:
        """Whether the server answers, and the outage counts (for /metrics)."""
        return self._reach.counts()

    # -- connections -------------------------------------------------------------------------

    def _configure(self, conn: psycopg.Connection[Any]) -> None:
        """Per new pooled connection: text params typed as text, vectors as float32 bytes."""
        from psycopg.types import TypeInfo

        conn.adapters.register_dumper(str, str_dumper())
        # Time text without an offset means UTC in storage SQL, as in SQLite (storage/ops.py).
        conn.execute("SET TIME ZONE 'UTC'")
        info = TypeInfo.fetch(conn, "vector")
        if info is None:  # before the schema created the extension (start-up only)
            return
        self._vector_oid = info.oid
        register_vector(conn, info.oid, VectorParam)
        if self.read_only:
            conn.execute("SET default_transaction_read_only = on")

    @contextmanager
    def session(self) -> Iterator[PgConnection]:
        """A connection of its own outside the pool, in autocommit (schema migration)."""
        import psycopg

        timeout = connect_timeout_arg(self._connect_timeout)
        conn = psycopg.connect(self.url, autocommit=True, connect_timeout=timeout)
        try:
            conn.adapters.register_dumper(str, str_dumper())
            conn.execute("SET TIME ZONE 'UTC'")
            yield PgConnection(conn, self._tracer)
        finally:
            conn.close()

    def reader(self) -> _Reader:
        """This thread's reader (statements borrow a pooled connection each)."""
        reader: _Reader | None = getattr(self._local, "reader", None)
        if reader is None:
            reader = _Reader(self)
            self._local.reader = reader
        return reader

    @contextmanager
    def snapshot(self) -> Iterator[_Reader]:
        """One read snapshot for every statement of the block: this thread's reader pins one
        pooled connection in a `REPEATABLE READ READ ONLY` transaction until the block ends
        (nested: the open one). Slow work without the database belongs outside the block."""
        reader = self.reader()
        if reader.in_transaction:
            yield reader
            return
        reader.execute("BEGIN")
        try:
            yield reader
        except BaseException:
            with contextlib.suppress(Exception):  # a dead connection: the pool drops it
                reader.end("ROLLBACK")
            raise
        reader.end("COMMIT")

    def in_snapshot(self) -> bool:
        """Whether this thread's reads are inside a read snapshot (`snapshot()`)."""
        reader: _Reader | None = getattr(self._local, "reader", None)
        return reader is not None and reader.in_transaction

    def snapshot_opening(self) -> bool:
        """Whether this thread's read snapshot is still being opened: its bounds not yet known,
        so that work which needs no database may run first and be checked against them."""
        reader: _Reader | None = getattr(self._local, "reader", None)
        return reader is not None and reader.opening

    def release_reader(self) -> None:
        """End this thread's read transaction if one is still open (the end of a tool call:
        no thread keeps a connection from one call to the next)."""
        reader: _Reader | None = getattr(self._local, "reader", None)
        if reader is not None and reader.in_transaction:
            with contextlib.suppress(Exception):  # a dead connection: the pool drops it
                reader.end()

    def open_connections(self) -> int:
        """How many connections the pool holds open."""
        return self._reach.open_connections()

    # -- writes ------------------------------------------------------------------------------

    @contextmanager
    def atomic(self, *, exclusive: bool = True) -> Iterator[PgConnection]:
        """A write transaction holding the maintenance lock (exclusive, or shared for a write
        tool that takes its own scoped locks); a SAVEPOINT when nested.

        Commits on success, rolls back on any exception (which propagates).
        """
        depth = getattr(self._local, "depth", 0)
        if depth > 0:
            if exclusive and not self._local.exclusive:
                # Taking it now, beside the shared hold, could deadlock with another server
                # doing the same: maintenance must open its own transaction.
                raise RuntimeError("an exclusive write nested in a write tool's transaction")
            conn: PgConnection = self._local.writer
            with savepoint(self._local, conn, depth, conn.execute_raw):
                yield conn
            return
        gate = self._write_lock if exclusive else contextlib.nullcontext()
        take = "pg_advisory_xact_lock" if exclusive else "pg_advisory_xact_lock_shared"
        with gate:
            # The lock rides with BEGIN (a constant key, no parameter): one round trip.
            ctx, conn, _ = self._begun("BEGIN", [(f"SELECT {take}({WRITE_LOCK_KEY})", ())])
            self._local.writer = conn
            self._local.depth = 1
            self._local.exclusive = exclusive
            failure: BaseException | None = None
            try:
                yield conn
            except BaseException as exc:
                failure = exc
                if conn.in_transaction:
                    with contextlib.suppress(Exception):  # a broken connection: the pool drops it
                        conn.execute_raw("ROLLBACK")
                raise
            else:
                try:
                    conn.execute_raw("COMMIT")
                except UnreachableError as exc:
                    # The server may have committed before the connection went.
                    raise InDoubtError(
                        f"the database became unreachable while this write was committing "
                        f"({exc}), so whether it was stored is unknown"
                    ) from exc
            finally:
                self._local.depth = 0
                self._local.writer = None
                ctx.__exit__(type(failure) if failure else None, failure, None)

    def write_connection(self) -> PgConnection:
        """A connection for statements outside a transaction: this thread's writer when inside
        `atomic()`; otherwise use `session()` (a pooled connection must go back)."""
        writer: PgConnection | None = getattr(self._local, "writer", None)
        if writer is None:
            raise RuntimeError("PgDatabase.write_connection() outside atomic(): use session()")
        return writer

    def vector_param(self, blob: bytes | None) -> VectorParam | None:
        """An embedding BLOB as a `vector` parameter; None (stored as NULL: no embedding) when
        the BLOB cannot be a vector."""
        return _vector_param(blob)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self.opener is not None:
            self.opener.shutdown(wait=True)
        if self.finisher is not None:
            self.finisher.close()
        self._reach.close()


class ConnectionFailed(RuntimeError):
    """The database server could not be reached or refused the login (one line)."""


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
