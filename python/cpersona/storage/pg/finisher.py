"""Ending read snapshots off the caller's path: a read-only transaction's COMMIT is sent and
its connection handed back to the pool by one thread of the database's, while the call that
read it goes on to answer.

Why: a recall's snapshot ends with COMMIT, a round trip that changes nothing (the transaction
is READ ONLY) but costs 0.25 ms in a recall on a two-core machine, because the PostgreSQL
backend has gone idle while the recall scored (docs/performance.md). Waiting for it delayed
every answer and told the caller nothing: a read-only COMMIT that fails loses nothing, and a
connection it leaves broken is discarded by the pool as any other.

Writes never come here: their COMMIT is the acknowledgement of what was stored.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cpersona.storage.pg.connection import PgConnection

log = logging.getLogger("cpersona.storage")

#: One snapshot to end: its connection and the pool context that gives the connection back.
_Pending = tuple["PgConnection", contextlib.AbstractContextManager["PgConnection"]]


class SnapshotFinisher:
    """One daemon thread that ends read snapshots in the order they were handed over."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[_Pending | None] = queue.SimpleQueue()
        self._idle = threading.Event()
        self._idle.set()
        self._lock = threading.Lock()
        self._pending = 0
        self._thread: threading.Thread | None = None
        self._closed = False

    def end(self, conn: PgConnection, ctx: contextlib.AbstractContextManager[PgConnection]) -> None:
        """COMMIT `conn`'s read-only transaction and give it back, soon; at once (in this
        thread) once the finisher is closed."""
        with self._lock:
            if self._closed:
                _finish(conn, ctx)
                return
            self._pending += 1
            self._idle.clear()
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="cpersona-pg-finisher", daemon=True
                )
                self._thread.start()
        self._queue.put((conn, ctx))

    def drain(self, timeout: float | None = None) -> bool:
        """Wait until every snapshot handed over has ended; whether they all did in time."""
        return self._idle.wait(timeout)

    def close(self, timeout: float = 5.0) -> None:
        """End what is pending, then stop the thread (later snapshots end in their caller)."""
        with self._lock:
            self._closed = True
            thread = self._thread
        if thread is not None:
            self._queue.put(None)
            thread.join(timeout)

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            _finish(*item)
            with self._lock:
                self._pending -= 1
                if self._pending == 0:
                    self._idle.set()


def _finish(conn: PgConnection, ctx: contextlib.AbstractContextManager[PgConnection]) -> None:
    try:
        conn.execute_raw("COMMIT")
    except Exception as exc:  # read only: nothing is lost; the pool drops a broken connection
        log.debug("ending a read snapshot failed (nothing lost): %s", exc)
    finally:
        with contextlib.suppress(Exception):
            ctx.__exit__(None, None, None)
