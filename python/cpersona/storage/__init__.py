"""Storage: the only package that speaks SQL (SQLite, or PostgreSQL in storage/pg/)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from cpersona.storage.db import Database, Tracer
from cpersona.storage.interface import Capabilities, Store
from cpersona.storage.schema import migrate

if TYPE_CHECKING:
    from cpersona.storage.pg.db import PgDatabase

__all__ = ["Capabilities", "Database", "Store", "database_label", "open_database"]


def open_database(
    path: str,
    *,
    fts_enabled: bool = True,
    tracer: Tracer | None = None,
    database_url: str | None = None,
    pool_size: int = 8,
    connect_timeout: float | None = None,
    vector_index: bool = False,
) -> Store:
    """Open (creating if needed) and migrate the database: PostgreSQL at `database_url` when
    given (CPERSONA_DATABASE_URL), else SQLite at `path` (`:memory:` allowed). `vector_index`:
    on PostgreSQL, the vector arm reads a host-local index file (SQLite's always does).

    psycopg is imported only on the PostgreSQL path (an SQLite start never loads it).
    """
    if database_url:
        return _open_pg(
            database_url,
            tracer=tracer,
            pool_size=pool_size,
            connect_timeout=connect_timeout,
            vector_index=vector_index,
        )
    db = Database(path, tracer=tracer)
    try:
        migrate(db, fts_enabled=fts_enabled)
    except BaseException:
        db.close()
        raise
    return db


def _open_pg(
    url: str,
    *,
    tracer: Tracer | None,
    pool_size: int,
    connect_timeout: float | None,
    vector_index: bool = False,
) -> PgDatabase:
    from cpersona.storage.pg.db import CONNECT_TIMEOUT, PgDatabase
    from cpersona.storage.pg.schema import migrate as migrate_pg

    timeout = CONNECT_TIMEOUT if connect_timeout is None else connect_timeout
    db = PgDatabase(
        url,
        pool_size=pool_size,
        tracer=tracer,
        connect_timeout=timeout,
        vector_index=vector_index,
    )
    try:
        migrate_pg(db)
    except BaseException:
        db.close()
        raise
    return db


def open_read_only(
    path: str, database_url: str | None, *, connect_timeout: float | None = None
) -> Store:
    """The database for a report-only run (the checkup CLI): nothing is migrated, created or
    written. SQLite opens the file read-only; PostgreSQL sessions are read-only
    (`default_transaction_read_only`) and the cpersona schema must already be there."""
    if not database_url:
        return Database(path, read_only=True)
    from cpersona.storage.pg.db import CONNECT_TIMEOUT, ConnectionFailed, PgDatabase

    timeout = CONNECT_TIMEOUT if connect_timeout is None else connect_timeout
    db = PgDatabase(database_url, pool_size=2, read_only=True, connect_timeout=timeout)
    try:
        found = db.query("SELECT to_regclass('memories') IS NOT NULL")
        if not found or not found[0][0]:
            raise ConnectionFailed(
                "it holds no cpersona tables (start a server on it once, or migrate into it)"
            )
    except BaseException:
        db.close()
        raise
    return db


def open_failure_reason(db_path: str, database_url: str | None, exc: BaseException) -> str:
    """Why the configured database could not be opened, in words an operator can act on (on
    SQLite, a full disk is named as such: SQLite itself says "disk I/O error")."""
    if database_url:
        return str(exc)
    from cpersona.storage.db import open_failure

    return open_failure(db_path, exc)


def database_label(db_path: str, database_url: str | None) -> str:
    """What names the configured database in messages: the path, or the URL without password."""
    if database_url:
        from cpersona.storage.pg.connection import redact

        return redact(database_url)
    return db_path
