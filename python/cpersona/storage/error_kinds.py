"""Backend-neutral storage errors: what code above `storage/` catches instead of driver errors.

Each backend registers one classifier for its driver's base exception (`register`); storage
functions that callers guard raise the translated error (`translated()`, `translating`),
chained to the driver's (`raise ... from exc`), so a log or `is_disk_full` still sees the
original. `str()` of a translated error is the driver's message unchanged: the documented
error shapes that quote it (`could not delete agent 'a': <message>`) read as before.

The kinds are the distinctions callers make today:

- `ConstraintError`: a UNIQUE / CHECK / NOT NULL / trigger ABORT refused the statement.
- `BusyError`: another writer held the lock past the busy timeout (SQLite BUSY / LOCKED;
  PostgreSQL lock_not_available, deadlock, serialization failure).
- `DiskFullError`: no space (SQLITE_FULL; PostgreSQL disk_full, SQLSTATE 53100).
- `CorruptError`: the database is damaged or not a database (SQLITE_CORRUPT / NOTADB;
  PostgreSQL data_corrupted / index_corrupted, SQLSTATE XX001 / XX002).
- `UnreachableError`: the database server cannot be reached (refused, lost, shutting down:
  PostgreSQL only; storage/pg/reach.py raises it), so the statement did not run.
- `OperationalError`: the statement could not run for another reason (a missing table, an
  FTS query the engine rejects, an I/O error, a lost connection).
- `StorageError`: any other driver error (the base of all of the above).

A second backend plugs in with one call when it is first used (storage/pg/errors.py does
this for psycopg when a PgDatabase opens)::

    errors.register(psycopg.Error, classify)  # classify(exc) -> a StorageError subclass
"""

from __future__ import annotations

import errno
import functools
import inspect
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])


class StorageError(Exception):
    """A database driver error, translated; `str()` is the driver's message."""


class OperationalError(StorageError):
    """The statement could not run (missing table, rejected query, I/O, lost connection)."""


class BusyError(OperationalError):
    """Another writer held the database's write lock past the timeout."""


class DiskFullError(OperationalError):
    """The disk (or quota) holding the database is full; the write was rolled back."""


class UnreachableError(OperationalError):
    """The database server cannot be reached; `str()` says so and why, in one sentence."""


class InDoubtError(UnreachableError):
    """The server became unreachable while a write was committing: it may have been stored."""


class CorruptError(StorageError):
    """The database is damaged or is not a database."""


class ConstraintError(StorageError):
    """A constraint (UNIQUE, CHECK, NOT NULL, a trigger's ABORT) refused the statement."""


#: Maps one driver exception to the kind it is; registered per backend.
Classifier = Callable[[BaseException], type[StorageError]]

_classifiers: list[tuple[type[BaseException], Classifier]] = []


def register(base: type[BaseException], classify: Classifier) -> None:
    """Translate exceptions that are instances of `base` with `classify` (one per backend;
    registering the same base again replaces its classifier)."""
    _classifiers[:] = [(b, c) for b, c in _classifiers if b is not base]
    _classifiers.append((base, classify))


def kind_of(exc: BaseException) -> type[StorageError] | None:
    """The storage error class `exc` translates to, or None when it is no driver error.

    A driver error re-raised as another driver's class (PgDatabase raises psycopg's errors
    as sqlite3's, chained) takes its cause's kind when that is more specific.
    """
    if isinstance(exc, StorageError):
        return type(exc)
    kind = None
    for base, classify in _classifiers:
        if isinstance(exc, base):
            kind = classify(exc)
            break
    cause = exc.__cause__
    if kind is not None and cause is not None and cause is not exc:
        deeper = kind_of(cause)
        if deeper is not None and deeper is not kind and issubclass(deeper, kind):
            return deeper
    return kind


def translate(exc: BaseException) -> StorageError | None:
    """`exc` as a storage error (chained to it), itself if it is one, or None."""
    if isinstance(exc, StorageError):
        return exc
    kind = kind_of(exc)
    if kind is None:
        return None
    err = kind(str(exc))
    err.__cause__ = exc
    return err


@contextmanager
def translated() -> Iterator[None]:
    """Re-raise a driver error raised in the block as its storage error."""
    try:
        yield
    except StorageError:
        raise
    except Exception as exc:
        err = translate(exc)
        if err is None:
            raise
        raise err from exc


def translating(fn: F) -> F:
    """Decorate a storage function (a plain function or a generator function) so driver
    errors it raises leave it translated."""
    if inspect.isgeneratorfunction(fn):

        @functools.wraps(fn)
        def gen(*args: Any, **kwargs: Any) -> Any:
            with translated():
                yield from fn(*args, **kwargs)

        return gen  # type: ignore[return-value]

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        with translated():
            return fn(*args, **kwargs)

    return call  # type: ignore[return-value]


#: What a write answers when the disk is full. "This write": a tool that commits in steps
#: (a health repair) keeps the steps it finished; the one that hit the full disk is undone.
DISK_FULL = (
    "the disk holding the database is full: this write was rolled back; free space and try again"
)


def unreachable_answer(tool: str, exc: BaseException) -> str:
    """What a tool answers when its database cannot be reached: the cause and what was not
    done, in one sentence. A tool that commits in steps (a health repair) keeps the steps it
    finished, as on a full disk."""
    if isinstance(exc, InDoubtError):
        return f"{exc}: look before writing it again once the database is back"
    return (
        f"{exc}: {tool} was not carried out and any write it had begun was rolled back; "
        "try again once the database is back"
    )


def unreachable_in(exc: BaseException) -> UnreachableError | None:
    """The `UnreachableError` that `exc` is, or was raised from or during; None if none."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, UnreachableError):
            return current
        current = current.__cause__ or current.__context__
    return None


def is_disk_full(exc: BaseException) -> bool:
    """Whether `exc`, or an error it was raised from or during, is a full disk or quota:
    a `DiskFullError` (any backend's, translated or not), or ENOSPC / EDQUOT from the
    operating system."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        kind = kind_of(current)
        if kind is not None and issubclass(kind, DiskFullError):
            return True
        if isinstance(current, OSError) and current.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        current = current.__cause__ or current.__context__
    return False


# -- SQLite ----------------------------------------------------------------------------------

_SQLITE_KINDS: dict[int, type[StorageError]] = {
    sqlite3.SQLITE_BUSY: BusyError,
    sqlite3.SQLITE_LOCKED: BusyError,
    sqlite3.SQLITE_FULL: DiskFullError,
    sqlite3.SQLITE_CORRUPT: CorruptError,
    sqlite3.SQLITE_NOTADB: CorruptError,
    sqlite3.SQLITE_CONSTRAINT: ConstraintError,
}


def _sqlite_kind(exc: BaseException) -> type[StorageError]:
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None and code & 0xFF in _SQLITE_KINDS:
        return _SQLITE_KINDS[code & 0xFF]
    if isinstance(exc, sqlite3.IntegrityError):
        return ConstraintError
    if code is None and "database is locked" in str(exc):  # raised without a code
        return BusyError
    if isinstance(exc, sqlite3.OperationalError):
        return OperationalError
    return StorageError


register(sqlite3.Error, _sqlite_kind)
