"""Connection setup: pragmas, one serialised writer, per-thread readers, `atomic()`.

SQLite in WAL mode. Writes go through one connection per process behind a lock and always
start with `BEGIN IMMEDIATE`, so two processes on one file queue on SQLite's write lock
(`busy_timeout`) instead of failing a deferred transaction's upgrade. Readers use their own
connection per thread, so a read sees committed WAL snapshots only. MCP runs sync handlers in
worker threads; no connection is shared across threads unguarded.

A thread's reader is bound to it until the end of its tool call (`release_reader`), or until
the thread ends: anyio retires a worker thread after 10 s idle and starts fresh ones for the
next burst, so readers kept until shutdown leaked descriptors (the database, its WAL) and a
page cache per retired thread (issue 11: 18 -> 196 descriptors in 6 bursts of 30 calls).
A released reader waits in a small idle stack (`IDLE_READERS`) for the next call of any thread.

Descriptors after a peak (issue 21): SQLite's unix VFS cannot close the database file's
descriptor of a connection that closes while another connection of the process holds a
POSIX lock on that file (closing it would drop the other's locks), and every open WAL-mode
connection holds one; it keeps the descriptor for reuse until no connection of the process
is open. So after a peak of 42 worker threads, closing their readers left 42 descriptors.
When the last lent reader comes back after such closes, the idle readers and the writer are
closed together and the writer reopened (`_recycle`): at that moment nothing holds a lock
and SQLite closes the kept descriptors.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import threading
import uuid
import weakref
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeVar

from cpersona import private_files
from cpersona.storage.error_kinds import DISK_FULL, is_disk_full
from cpersona.storage.interface import Capabilities, Connection, Params, Row
from cpersona.storage.ops import SQLITE, OpsConnection, SqlOps

if TYPE_CHECKING:
    pass

__all__ = ["DISK_FULL", "Database", "is_disk_full", "open_failure"]

log = logging.getLogger("cpersona.storage")

#: Milliseconds a connection waits for another process's write lock before failing.
BUSY_TIMEOUT_MS = 10_000
#: Released readers kept open for the next calls; one released beyond it is closed.
IDLE_READERS = 8

Tracer = Callable[[str, Any], None]

#: The range of an SQLite INTEGER: a row id outside it names no row (and cannot be bound).
SQLITE_INT_MIN = -(2**63)
SQLITE_INT_MAX = 2**63 - 1


def is_row_id(value: int) -> bool:
    """Whether `value` can be an SQLite row id (binding a larger int raises OverflowError)."""
    return SQLITE_INT_MIN <= value <= SQLITE_INT_MAX


class _InTransaction(Protocol):
    @property
    def in_transaction(self) -> bool: ...


C = TypeVar("C", bound=_InTransaction)


@contextmanager
def savepoint(
    local: threading.local, conn: C, depth: int, run: Callable[[str], object]
) -> Iterator[C]:
    """A write nested in this thread's transaction on `conn` (either backend): a SAVEPOINT
    at `depth` (the thread's `local.depth` while it runs), released when the block ends and
    rolled back to alone when it fails. The block's error is the one that propagates: a
    transaction the backend has already rolled back (SQLite on SQLITE_FULL, a PostgreSQL
    transaction aborted) leaves the outer transaction to end it."""
    run(f"SAVEPOINT sp{depth}")
    local.depth = depth + 1
    try:
        yield conn
    except BaseException:
        local.depth = depth
        if conn.in_transaction:
            with contextlib.suppress(Exception):
                run(f"ROLLBACK TO SAVEPOINT sp{depth}")
                run(f"RELEASE SAVEPOINT sp{depth}")
        raise
    local.depth = depth
    run(f"RELEASE SAVEPOINT sp{depth}")


class Statements:
    """`Store.query` and `query_one` for either database: one statement on this thread's
    read connection, whatever backend's `reader()` lends it."""

    def reader(self) -> Connection:
        raise NotImplementedError

    def query(self, sql: str, params: Params = ()) -> list[Row]:
        return self.reader().execute(sql, params).fetchall()

    def query_one(self, sql: str, params: Params = ()) -> Row | None:
        rows = self.query(sql, params)
        return rows[0] if rows else None


class Database(Statements):
    """One SQLite database file: a guarded writer connection and per-thread readers."""

    #: Which backend this is; storage modules branch on it where SQL differs (issue 12).
    dialect: Literal["sqlite", "postgresql"] = "sqlite"
    #: The SQL fragments this backend spells its own way (storage/ops.py).
    ops: SqlOps = SQLITE
    #: Whether text may hold U+0000 (PostgreSQL's text cannot; tools refuse it there).
    stores_nul = True
    #: One file on this host: the index files beside it are the vector arm and (or FTS5) the
    #: full-text arm.
    capabilities = Capabilities(
        vector_arm="index_file",
        full_text_in_database=True,
        derived_files="beside_database",
        local_files=True,
        shared=False,
    )

    def __init__(self, path: str, *, tracer: Tracer | None = None, read_only: bool = False) -> None:
        """Open `path`. `read_only` (report-only maintenance, surface.md §7.7) sets only
        `busy_timeout`: no journal-mode change, nothing created, and a missing file fails."""
        self.path = path
        self.is_memory = path == ":memory:"
        self.read_only = read_only and not self.is_memory
        # A private shared-cache name lets several connections see one in-memory database.
        self._uri: str | None = None
        if self.is_memory:
            self._uri = f"file:cpersona-{uuid.uuid4().hex}?mode=memory&cache=shared"
        elif self.read_only:
            self._uri = f"{Path(path).resolve().as_uri()}?mode=ro"
        self._tracer = tracer
        self._write_lock = threading.RLock()
        self._local = threading.local()
        self._all: set[sqlite3.Connection] = set()
        self._all_lock = threading.Lock()  # _all, _idle, _lent, _kept
        self._idle: list[sqlite3.Connection] = []
        self._lent = 0  # readers bound to a thread
        self._kept = 0  # readers closed while other connections were open (see the docstring)
        self._closed = False
        if not self.is_memory and not self.read_only:
            _prepare_file(Path(path))
        self._writer = self._open_writer()

    def _open_writer(self) -> sqlite3.Connection:
        writer = self._connect()
        if self.read_only:
            return writer
        if not self.is_memory:
            mode = writer.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                log.warning("journal_mode is %s, not WAL (filesystem without shared memory?)", mode)
        # FULL: a commit survives power loss too, not only a killed process (an acknowledged
        # store must never be lost). CPersona 2.5.x uses NORMAL; see docs/compatibility.md.
        writer.execute("PRAGMA synchronous=FULL")
        return writer

    def _connect(self) -> sqlite3.Connection:
        if self._uri is not None:
            conn = sqlite3.connect(
                self._uri,
                uri=True,
                isolation_level=None,
                check_same_thread=False,
                factory=OpsConnection,
            )
        else:
            conn = sqlite3.connect(
                self.path, isolation_level=None, check_same_thread=False, factory=OpsConnection
            )
        conn.row_factory = sqlite3.Row
        conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        conn.execute("PRAGMA foreign_keys=ON")
        # REPLACE conflict resolution then fires delete triggers, so the FTS index and the
        # vector log also see rows a REPLACE removes.
        conn.execute("PRAGMA recursive_triggers=ON")
        if self._tracer is not None:
            tracer = self._tracer
            conn.set_trace_callback(lambda sql: tracer(sql, None))
        with self._all_lock:
            self._all.add(conn)
        return conn

    def _forget(self, conn: sqlite3.Connection) -> None:
        """Close a retired thread's reader and stop tracking it (a background thread's, or a
        worker's that never ended a call): it may have been the last one lent."""
        with self._all_lock:
            self._lent -= 1
        self._drop(conn)
        self._recycle()

    def _drop(self, conn: sqlite3.Connection) -> None:
        with self._all_lock:
            self._all.discard(conn)
            self._kept += bool(self._all)
        with contextlib.suppress(sqlite3.Error):  # closing is best effort
            conn.close()

    # -- reads -------------------------------------------------------------------------------

    def reader(self) -> sqlite3.Connection:
        """This thread's read connection (autocommit: each statement sees the newest commit)."""
        slot: _ReaderSlot | None = getattr(self._local, "reader", None)
        if slot is None:
            with self._all_lock:
                conn = self._idle.pop() if self._idle else None
                self._lent += 1
            slot = _ReaderSlot(conn if conn is not None else self._connect())
            # The thread-local slot is dropped when its thread ends (CPython clears a finished
            # thread's locals), and the finalizer then closes the reader in that moment.
            # WeakMethod: the finalizer must not keep this Database alive.
            slot.finalizer = weakref.finalize(
                slot, _close_reader, weakref.WeakMethod(self._forget), slot.conn
            )
            self._local.reader = slot
        return slot.conn

    def release_reader(self) -> None:
        """Unbind this thread's reader (the end of a tool call) into the idle stack, or close
        it when the stack is full; a reader inside a read transaction stays bound."""
        slot: _ReaderSlot | None = getattr(self._local, "reader", None)
        if slot is None or slot.conn.in_transaction or self._closed:
            return
        slot.finalizer.detach()
        del self._local.reader
        with self._all_lock:
            self._lent -= 1
            keep = len(self._idle) < IDLE_READERS
            if keep:
                self._idle.append(slot.conn)
        if not keep:
            self._drop(slot.conn)
        self._recycle()

    def _recycle(self) -> None:
        """Close every connection at once and reopen the writer, when readers were closed
        beside open connections and none is lent now (see the module docstring)."""
        if self._kept == 0 or self._lent or self.is_memory:
            return
        if not self._write_lock.acquire(blocking=False):
            return  # a write is running: a later release tries again
        try:
            with self._all_lock:
                if self._kept == 0 or self._lent or self._closed:
                    return
                conns, self._idle = [*self._idle, self._writer], []
                self._all.difference_update(conns)
                self._kept = 0
            for conn in conns:
                with contextlib.suppress(sqlite3.Error):  # closing is best effort
                    conn.close()
            self._writer = self._open_writer()
        finally:
            self._write_lock.release()

    @contextmanager
    def snapshot(self) -> Iterator[sqlite3.Connection]:
        """One read snapshot for every statement of the block: a deferred `BEGIN` on this
        thread's reader, so the block's first read fixes the WAL snapshot that all its later
        reads see, ended when the block ends. Inside an open snapshot, the block joins it.

        Writes in the block go through `atomic()` (the writer connection) and are not seen by
        the block's reads; a recall's bookkeeping therefore runs after its snapshot.
        """
        conn = self.reader()
        if conn.in_transaction:
            yield conn
            return
        conn.execute("BEGIN")
        try:
            yield conn
        except BaseException:
            # The block's error is the one to raise; a reader left inside the transaction
            # would make every later snapshot of this thread join this old one.
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    def in_snapshot(self) -> bool:
        """Whether this thread's reads are inside a read snapshot (`snapshot()`)."""
        slot: _ReaderSlot | None = getattr(self._local, "reader", None)
        return slot is not None and slot.conn.in_transaction

    def snapshot_opening(self) -> bool:
        """Never: an SQLite snapshot is open as soon as it is asked for (PostgreSQL's may still
        be on its way: storage/pg/db.py)."""
        return False

    def open_connections(self) -> int:
        """How many connections this Database holds open (the writer and live threads' readers)."""
        with self._all_lock:
            return len(self._all)

    # -- writes ------------------------------------------------------------------------------

    @contextmanager
    def atomic(self, *, exclusive: bool = True) -> Iterator[sqlite3.Connection]:
        """A write transaction: BEGIN IMMEDIATE outside, a named SAVEPOINT when nested
        (`exclusive` changes nothing: SQLite has one writer at a time anyway).

        Commits on success, rolls back on any exception (which propagates).
        """
        with self._write_lock:
            conn = self._writer
            depth = getattr(self._local, "depth", 0)
            if depth > 0:
                with savepoint(self._local, conn, depth, conn.execute):
                    yield conn
                return
            conn.execute("BEGIN IMMEDIATE")
            self._local.depth = 1
            try:
                yield conn
            except BaseException:
                self._local.depth = 0
                # SQLite may have rolled the whole transaction back itself (SQLITE_FULL,
                # SQLITE_IOERR, SQLITE_NOMEM): a ROLLBACK then fails and would replace the
                # error that says what happened.
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            self._local.depth = 0
            conn.execute("COMMIT")

    def vector_param(self, blob: bytes | None) -> bytes | None:
        """An embedding BLOB as the parameter that stores it: on SQLite, the bytes unchanged
        (PgDatabase binds a pgvector `vector`)."""
        return blob

    def write_connection(self) -> sqlite3.Connection:
        """The writer, for statements that must run outside a transaction (VACUUM, pragmas)."""
        return self._writer

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        with self._all_lock:
            conns, self._all = self._all, set()
        for conn in conns:
            with contextlib.suppress(sqlite3.Error):  # closing is best effort
                conn.close()


class _ReaderSlot:
    """Holds one thread's reader in that thread's locals; its death closes the reader."""

    __slots__ = ("__weakref__", "conn", "finalizer")

    finalizer: weakref.finalize[Any, Any]

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn


def _close_reader(
    forget: weakref.WeakMethod[Callable[[sqlite3.Connection], None]], conn: sqlite3.Connection
) -> None:
    method = forget()
    if method is not None:
        method(conn)
    else:  # the Database is gone; its close() may not have run
        with contextlib.suppress(sqlite3.Error):
            conn.close()


def open_failure(path: str, exc: BaseException) -> str:
    """Why `path` could not be opened, in words an operator can act on.

    A WAL database that was closed cleanly has no `-shm` and `-wal` files, and opening it
    creates them: on a full disk that fails as "disk I/O error", which names no cause.
    """
    if is_disk_full(exc):
        return f"{exc} (the disk holding the database is full: free space and try again)"
    try:
        free = os.statvfs(Path(path).resolve().parent).f_bavail
    except OSError:
        return str(exc)
    if free == 0:
        return f"{exc} (the disk holding the database is full: free space and try again)"
    return str(exc)


def _prepare_file(path: Path) -> None:
    """Create the parent directory (0700) and warn when the file is readable by others."""
    private_files.make_dirs(path.parent)
    if not path.exists():  # SQLite gives the -wal, -shm and -journal files this file's mode
        os.close(private_files.open_or_create(path, os.O_WRONLY))
    elif path.is_file() and path.stat().st_mode & 0o077:
        log.warning("database %s is readable by group or others; consider chmod 600", path)


def dialect_of(conn: object) -> str:
    """The backend of a connection of either Database ("sqlite" or "postgresql"), for the
    storage functions that take a connection and must branch (few)."""
    return str(getattr(conn, "dialect", "sqlite"))


def embedding_param(conn: object, blob: bytes | None) -> object:
    """The parameter that stores `blob` in an embedding column through `conn` (a connection of
    either backend): the bytes on SQLite, a pgvector `vector` (or NULL when the BLOB cannot be
    one) on PostgreSQL (`PgDatabase.vector_param`)."""
    convert = getattr(conn, "vector_param", None)
    return blob if convert is None else convert(blob)


def row_params(conn: object, record: object, names: tuple[str, ...]) -> tuple[object, ...]:
    """The values of `record`'s fields `names`, bound as the backend takes them: a truth value
    as 0 or 1 (the columns are INTEGER on both backends), the embedding as `embedding_param`."""
    values: list[object] = []
    for name in names:
        value = getattr(record, name)
        if name == "embedding":
            value = embedding_param(conn, value)
        elif isinstance(value, bool):
            value = 1 if value else 0
        values.append(value)
    return tuple(values)


def id_batches(ids: Sequence[int], size: int = 500) -> Iterator[tuple[list[int], str]]:
    """`ids` in batches of `size` (a bound parameter list stays under SQLite's limit), each
    with its `?, ?, ...` placeholder list."""
    for start in range(0, len(ids), size):
        batch = list(ids[start : start + size])
        yield batch, ",".join("?" * len(batch))


def quote_identifier(name: str) -> str:
    """Quote an SQL identifier (table or column name) that must be interpolated."""
    return '"' + name.replace('"', '""') + '"'
