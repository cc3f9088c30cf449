"""Whether the PostgreSQL server answers, and the connection pool that reaches it (issue 21).

Owns the current pool and the outage state of one PgDatabase:

- A pooled connection found dead (the server restarted, the network dropped it) makes the
  thread that found it try one new connection. If the server answers, the whole pool is
  replaced by a fresh one (after a restart every idle connection in it is dead too) and the
  statement is retried once when nothing of it had run (`StaleConnection`); no connection
  that failed is ever handed out again.
- If the server does not answer, an outage begins: one WARNING line with the reason, the pool
  is closed at once (its background reconnect attempts would wait, back off for minutes and
  log each failure), and every call is refused with an `UnreachableError` without waiting.
  One thread at a time, at most every `PROBE_INTERVAL` seconds, tries one connection (bounded
  by the connect timeout); the first that succeeds builds a new pool and ends the outage with
  one INFO line saying how long it lasted and how many calls were refused.
- The counts (`Counts`) are read by /metrics (server/metrics.py).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cpersona.storage.error_kinds import BusyError, UnreachableError

if TYPE_CHECKING:
    import psycopg_pool

log = logging.getLogger("cpersona.storage")

#: Seconds between two connection attempts while the server is unreachable: recovery is
#: noticed within this of the server's return, and a server still starting up is asked at
#: most five times a second.
PROBE_INTERVAL = 0.2

#: SQLSTATEs that mean the server closed or refused the session: class 08 (connection
#: exception) and 57P01-57P03 (admin shutdown, crash shutdown, cannot connect now).
_GONE_STATES = ("57P01", "57P02", "57P03")


class StaleConnection(UnreachableError):
    """A pooled connection was dead but the server answers: the pool was replaced, and a
    statement of which nothing had run may be retried on the new one."""


@dataclass(frozen=True, slots=True)
class Counts:
    """What /metrics reports about reaching the database."""

    reachable: bool
    outages: int
    refused_calls: int
    pool_replacements: int


def connect_timeout_arg(seconds: float) -> int:
    """libpq's `connect_timeout` (whole seconds; it treats anything below 2 as 2)."""
    return max(2, math.ceil(seconds))


def is_connection_failure(exc: BaseException, conn: Any = None) -> bool:
    """Whether `exc` (a psycopg error) means the session is gone rather than the statement
    refused: the connection is closed or broken, or the server said it is shutting down."""
    import psycopg

    if not isinstance(exc, psycopg.OperationalError):
        return False
    if conn is not None and (conn.closed or getattr(conn, "broken", False)):
        return True
    state = str(getattr(exc, "sqlstate", None) or "")
    return state.startswith("08") or state in _GONE_STATES


def _reason(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0].strip() if text else type(exc).__name__


class Reach:
    """The pool of one database and whether the server answers (see the module docstring).

    `make_pool()` returns an opened pool (raising when it cannot fill its first connection);
    `probe()` opens and closes one connection (raising psycopg's error when it cannot).
    """

    def __init__(
        self,
        label: str,
        make_pool: Callable[[], psycopg_pool.ConnectionPool[Any]],
        probe: Callable[[], None],
    ) -> None:
        self._label = label
        self._make_pool = make_pool
        self._probe = probe
        self._lock = threading.Lock()  # the fields below
        self._build = threading.Lock()  # one thread at a time replaces the pool
        self._pool: psycopg_pool.ConnectionPool[Any] | None = None
        self._generation = 0
        self._down_since: float | None = None
        self._reason = ""
        self._next_probe = 0.0
        self._closed = False
        self._outages = 0
        self._refused = 0
        self._refused_this_outage = 0
        self._replacements = 0

    # -- what PgDatabase asks ----------------------------------------------------------------

    def pool(self) -> tuple[psycopg_pool.ConnectionPool[Any], int]:
        """The pool to borrow from and its generation (for `lost`).

        Raises:
            UnreachableError: the server is unreachable (at once, or after one bounded
                connection attempt when it is this thread's turn to try).
            sqlite3.ProgrammingError: the database was closed.
        """
        with self._lock:
            self._check_open()
            if self._pool is not None:
                return self._pool, self._generation
            generation, down = self._generation, self._down_since is not None
            if down and (time.monotonic() < self._next_probe or self._build.locked()):
                return_refusal = self._refusal_locked()
            else:
                return_refusal = None
        if return_refusal is not None:
            raise return_refusal
        return self._rebuild(generation)

    def lost(self, exc: BaseException, generation: int) -> UnreachableError:
        """The error to raise for `exc`, a connection of pool `generation` found dead (or the
        pool unable to give one): `StaleConnection` when the server answers (the pool is then
        a fresh one), else the outage's `UnreachableError`."""
        stale = StaleConnection(f"a connection to the database was lost ({_reason(exc)})")
        with self._lock:
            if self._generation != generation and self._pool is not None:
                return stale
            if self._pool is None and self._down_since is not None:
                return self._refusal_locked()  # the outage is known; `pool()` paces the tries
        try:
            self._rebuild(generation, cause=exc)
        except UnreachableError as err:
            return err
        return stale

    def busy(self, generation: int, waited: float) -> Exception:
        """The error for a pool that gave no connection within `waited` seconds: the outage's
        when the server is gone, else a BusyError (every connection was in use)."""
        try:
            self._probe()
        except Exception as probe_exc:
            return self.lost(probe_exc, generation)
        return BusyError(f"no connection to the database became free within {waited:g} s")

    def counts(self) -> Counts:
        with self._lock:
            return Counts(
                reachable=self._down_since is None,
                outages=self._outages,
                refused_calls=self._refused,
                pool_replacements=self._replacements,
            )

    def open_connections(self) -> int:
        pool = self._pool
        return 0 if pool is None else int(pool.get_stats().get("pool_size", 0))

    def close(self) -> None:
        with self._lock:
            self._closed = True
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.close()

    # -- the pool's life ---------------------------------------------------------------------

    def _rebuild(
        self, generation: int, cause: BaseException | None = None
    ) -> tuple[psycopg_pool.ConnectionPool[Any], int]:
        """A new pool in place of generation `generation`'s (unless another thread already
        replaced it), or the outage's error when the server does not answer."""
        with self._build:
            with self._lock:
                self._check_open()
                if self._generation != generation and self._pool is not None:
                    return self._pool, self._generation
                now = time.monotonic()
                if self._down_since is not None and now < self._next_probe:
                    # Another thread tried while this one waited: one try per interval.
                    refusal = self._refusal_locked()
                    raise refusal
                self._next_probe = now + PROBE_INTERVAL
                was_down = self._down_since is not None
                # The generation moves when the new pool is in place: a thread that saw the
                # old one waits here for it instead of building another.
                old, self._pool = self._pool, None
            if old is not None:  # dead or not, nothing may borrow from it again
                _close_later(old)
            try:
                if cause is not None or was_down:
                    self._probe()  # fails at once when nothing listens; make_pool would wait
                pool = self._make_pool()
            except Exception as exc:
                raise self._begin_outage(exc) from None
            with self._lock:
                if self._closed:
                    _close_later(pool)
                    self._check_open()
                self._pool = pool
                self._generation += 1
                self._replacements += old is not None or was_down
                ended, self._down_since = self._down_since, None
                result, refused = (pool, self._generation), self._refused_this_outage
        if ended is not None:
            log.info(
                "the database %s is reachable again after %.1f s; %d calls were refused meanwhile",
                self._label,
                time.monotonic() - ended,
                refused,
            )
        return result

    def _begin_outage(self, exc: BaseException) -> UnreachableError:
        """Enter the outage (logged once) and return the refusal for this call."""
        with self._lock:
            first = self._down_since is None
            if first:
                self._down_since = time.monotonic()
                self._reason = _reason(exc)
                self._outages += 1
                self._refused_this_outage = 0
            refusal = self._refusal_locked()
        if first:
            log.warning(
                "the database %s is unreachable (%s): calls that need it answer an error "
                "until it is back",
                self._label,
                self._reason,
            )
        return refusal

    def _refusal_locked(self) -> UnreachableError:
        self._refused += 1
        self._refused_this_outage += 1
        return UnreachableError(f"the database is unreachable ({self._reason or 'no answer'})")

    def _check_open(self) -> None:
        if self._closed:
            import sqlite3

            raise sqlite3.ProgrammingError("Cannot operate on a closed database.")


def _close_later(pool: psycopg_pool.ConnectionPool[Any]) -> None:
    """Close `pool` off this thread: closing waits for its workers (one may be inside a
    connection attempt); connections still lent out are closed when they come back."""
    threading.Thread(target=pool.close, name="cpersona-pool-close", daemon=True).start()
