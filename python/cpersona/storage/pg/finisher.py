"""Ending read snapshots off the caller's path: a read-only transaction's COMMIT is sent and
its connection handed back to the pool by one thread of the database's, while the call that
read it goes on to answer.

Why: a recall's snapshot ends with COMMIT, a round trip that changes nothing (the transaction
is READ ONLY) but costs 0.25 ms in a recall on a two-core machine, because the PostgreSQL
backend has gone idle while the recall scored (docs/notes/performance-notes.md). Waiting for
it delayed
every answer and told the caller nothing: a read-only COMMIT that fails loses nothing, and a
connection it leaves broken is discarded by the pool as any other.

Writes never come here: their COMMIT is the acknowledgement of what was stored.
"""

from __future__ import annotations

import contextlib
import logging
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cpersona.storage.pg.connection import PgConnection

log = logging.getLogger("cpersona.storage")


class SnapshotFinisher:
    """One thread (made on first use) that ends read snapshots in the order handed over."""

    def __init__(self) -> None:
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="cpersona-pg-finisher")

    def end(self, conn: PgConnection, ctx: contextlib.AbstractContextManager[PgConnection]) -> None:
        """COMMIT `conn`'s read-only transaction and give it back, soon; at once (in this
        thread) once the finisher is closed."""
        try:
            self._pool.submit(_finish, conn, ctx)
        except RuntimeError:  # shut down: the caller ends its own
            _finish(conn, ctx)

    def drain(self, timeout: float | None = None) -> bool:
        """Wait until every snapshot handed over has ended (one worker: in order, so a no-op
        submitted now runs after them); whether they all did in time."""
        try:
            self._pool.submit(lambda: None).result(timeout)
        except RuntimeError:  # shut down, which waited for them
            return True
        except TimeoutError:
            return False
        return True

    def close(self) -> None:
        """End what is pending; later snapshots end in their caller."""
        self._pool.shutdown(wait=True)


def _finish(conn: PgConnection, ctx: contextlib.AbstractContextManager[PgConnection]) -> None:
    try:
        conn.execute_raw("COMMIT")
    except Exception as exc:  # read only: nothing is lost; the pool drops a broken connection
        log.debug("ending a read snapshot failed (nothing lost): %s", exc)
    finally:
        with contextlib.suppress(Exception):
            ctx.__exit__(None, None, None)
