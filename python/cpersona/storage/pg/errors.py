"""psycopg's errors as the backend-neutral storage errors (storage/error_kinds.py).

Registered by `install()` when a PgDatabase is opened (psycopg is imported only then). The
kinds follow SQLSTATE classes, so every server error lands on what callers distinguish:

- 23xxx integrity_constraint_violation -> ConstraintError
- 53100 disk_full (and 53xxx insufficient_resources' disk case) -> DiskFullError
- 55P03 lock_not_available, 40P01 deadlock_detected, 40001 serialization_failure,
  57014 query_canceled (a lock or statement timeout) -> BusyError
- XX001 data_corrupted, XX002 index_corrupted -> CorruptError
- other psycopg.OperationalError (connection lost, server shutting down), 42xxx (a statement
  PostgreSQL rejects), 22xxx (data exceptions) -> OperationalError
- anything else from psycopg -> StorageError

PgDatabase re-raises a psycopg error as the sqlite3 class SQLite would have raised, chained to
it (`raise ... from exc`); `error_kinds.kind_of` prefers the more specific kind of that cause, so
a full disk on PostgreSQL is a DiskFullError like SQLITE_FULL.
"""

from __future__ import annotations

from cpersona.storage import error_kinds

_BY_STATE: dict[str, type[error_kinds.StorageError]] = {
    "53100": error_kinds.DiskFullError,
    "55P03": error_kinds.BusyError,
    "40P01": error_kinds.BusyError,
    "40001": error_kinds.BusyError,
    "57014": error_kinds.BusyError,
    "XX001": error_kinds.CorruptError,
    "XX002": error_kinds.CorruptError,
}


def classify(exc: BaseException) -> type[error_kinds.StorageError]:
    import psycopg

    state = str(getattr(exc, "sqlstate", None) or "")
    if state in _BY_STATE:
        return _BY_STATE[state]
    if state.startswith("23") or isinstance(exc, psycopg.IntegrityError):
        return error_kinds.ConstraintError
    if state.startswith(("42", "22")) or isinstance(exc, psycopg.OperationalError):
        return error_kinds.OperationalError
    return error_kinds.StorageError


def install() -> None:
    """Register `classify` for psycopg's errors (idempotent)."""
    import psycopg

    error_kinds.register(psycopg.Error, classify)
