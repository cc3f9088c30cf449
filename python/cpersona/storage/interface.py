"""The storage interface: what every backend's store, connections, cursors and rows offer
(typing Protocols), and what a store can do (`Capabilities`), which is what code above
storage/ asks instead of which backend runs.

`storage.db.Database` (SQLite) and `storage.pg.db.PgDatabase` (PostgreSQL) both satisfy
`Store` structurally (mypy --strict checks it where `open_database` returns either); neither
inherits from anything here. docs/architecture.md, "Storage interface", says what a third
backend must provide.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol, overload

if TYPE_CHECKING:
    from cpersona.storage.ops import SqlOps

__all__ = ["Capabilities", "Connection", "Cursor", "Params", "Row", "Store"]

#: The parameters of one statement, bound to its `?` placeholders in order.
Params = Sequence[Any]


class Row(Protocol):
    """One result row: `row[0]`, `row["column"]`, `tuple(row)`, `dict(zip(row.keys(), row))`."""

    @overload
    def __getitem__(self, key: int | str, /) -> Any: ...

    @overload
    def __getitem__(self, key: slice, /) -> tuple[Any, ...]: ...

    def __iter__(self) -> Iterator[Any]: ...

    def __len__(self) -> int: ...

    def keys(self) -> list[str]: ...


class Cursor(Protocol):
    """The results of one statement."""

    @property
    def rowcount(self) -> int: ...

    @property
    def lastrowid(self) -> int | None: ...

    # Any, as in the sqlite3 driver's own stubs: an aggregate's one row is indexed at once
    # (`fetchone()[0]`) all over storage/; otherwise the value is a Row or None.
    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Row]: ...

    def fetchmany(self, size: int = ..., /) -> list[Row]: ...

    def __iter__(self) -> Iterator[Row]: ...


class Connection(Protocol):
    """A connection a storage function runs statements on: a store's reader (autocommit, or
    inside an explicit BEGIN ... COMMIT read transaction) or the writer `atomic()` yields."""

    @property
    def in_transaction(self) -> bool: ...

    def execute(self, sql: str, params: Params = ..., /) -> Cursor: ...


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What a store can do, which decides where each part of recall runs and which files this
    host keeps (retrieval.md §4; docs/architecture.md, "Storage interface")."""

    #: Where the vector arm scans a table: "index_file", a memory-mapped index this host keeps
    #: (vectors/index.py), rebuilt from the database; "database", one statement in it.
    vector_arm: Literal["index_file", "database"]
    #: Whether the database has a full-text search of its own (SQLite's FTS5) that answers
    #: when no full-text index file is kept; without it the index file is the arm, required.
    full_text_in_database: bool
    #: Where this host keeps the files derived from the database (the full-text index files,
    #: and the vector index files when `vector_arm` is "index_file"): "beside_database", named
    #: after the database file; "host_cache", in this host's cache directory (derived/placement.py).
    derived_files: Literal["beside_database", "host_cache"]
    #: Whether the database is files on this host, so that file-level checks apply (their
    #: permissions, the WAL beside them, the sidecar and index files named after them).
    local_files: bool
    #: Whether servers on several hosts may share this database: state they must agree on
    #: (the calibration, the no-persist pauses, the alias ledger: storage/shared.py) lives in
    #: the database, and change logs are kept for other hosts.
    shared: bool


class Store(Protocol):
    """One database, as storage functions and the Engine use it.

    Reads: `query`/`query_one` (one autocommit statement each), or `reader()` for several on
    this thread's read connection; `release_reader()` at the end of each tool call. Writes:
    `with store.atomic() as conn:` one transaction (a savepoint when nested), committed on
    success and rolled back on any exception; `atomic(exclusive=False)` for a write tool's
    transaction, which locks what it touches itself.
    """

    @property
    def capabilities(self) -> Capabilities: ...

    #: The SQL fragments this backend spells its own way (storage/ops.py).
    @property
    def ops(self) -> SqlOps: ...

    #: Which SQL dialect the store speaks; only storage/ reads it (tests/test_seam.py).
    @property
    def dialect(self) -> Literal["sqlite", "postgresql"]: ...

    #: Whether text may hold U+0000 (PostgreSQL's text cannot; tools refuse it there).
    @property
    def stores_nul(self) -> bool: ...

    #: What names the database in messages and keys the derived files' names: the SQLite
    #: file's path, or the PostgreSQL URL without its password.
    @property
    def path(self) -> str: ...

    #: An in-memory database (its derived files go to a private temporary directory).
    @property
    def is_memory(self) -> bool: ...

    @property
    def read_only(self) -> bool: ...

    def reader(self) -> Connection: ...

    def release_reader(self) -> None: ...

    def query(self, sql: str, params: Params = ..., /) -> list[Row]: ...

    def query_one(self, sql: str, params: Params = ..., /) -> Row | None: ...

    def atomic(self, *, exclusive: bool = ...) -> AbstractContextManager[Connection]:
        """One write transaction. `exclusive=False`: a write tool's, which takes the locks its
        rows need itself (storage/writes.py `lock_scopes`) and runs beside other servers'
        writes on PostgreSQL; exclusive (the default) runs alone. SQLite has one writer."""
        ...

    def snapshot(self) -> AbstractContextManager[Connection]:
        """This thread's reader inside one read snapshot for the whole block (a recall, a
        listing, an export); nested, the open one."""
        ...

    def in_snapshot(self) -> bool: ...

    def snapshot_opening(self) -> bool:
        """Whether this thread's snapshot is asked for but its bounds are not known yet."""
        ...

    def write_connection(self) -> Connection: ...

    def vector_param(self, blob: bytes | None, /) -> object:
        """An embedding BLOB (little-endian float32) as the parameter that stores it."""
        ...

    def open_connections(self) -> int: ...

    def close(self) -> None: ...
