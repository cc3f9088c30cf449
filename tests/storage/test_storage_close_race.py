"""Closing a database while threads' readers die (their finalizers close and recycle
connections) never closes one connection twice, never leaves one open, and never crashes.

Found under pytest-xdist: a fixture's teardown called Database.close() while a finished
thread's reader finalizer ran _forget -> _recycle; both closed the same sqlite3 connection and
the worker died of a segfault."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

from cpersona.storage.db import Database


def _readers_then_exit(db: Database, n: int, started: threading.Barrier) -> list[threading.Thread]:
    def work() -> None:
        db.reader().execute("SELECT 1").fetchone()
        started.wait(timeout=30)
        # The thread ends here: its reader's finalizer closes the reader and may recycle.

    threads = [threading.Thread(target=work) for _ in range(n)]
    for t in threads:
        t.start()
    return threads


def test_close_beside_dying_readers_closes_every_connection_once(tmp_path: Path) -> None:
    for round_ in range(40):
        db = Database(str(tmp_path / f"race{round_}.db"))
        opened: list[sqlite3.Connection] = []
        connect = db._connect

        def tracked(connect=connect, opened=opened) -> sqlite3.Connection:
            conn = connect()
            opened.append(conn)
            return conn

        db._connect = tracked  # type: ignore[method-assign]
        started = threading.Barrier(9)
        threads = _readers_then_exit(db, 8, started)
        started.wait(timeout=30)
        db.close()
        for t in threads:
            t.join()
        # Every connection ever opened is closed: a closed connection refuses statements.
        for conn in [*opened, db._writer]:
            try:
                conn.execute("SELECT 1")
            except sqlite3.ProgrammingError as exc:
                assert "closed" in str(exc)
            else:
                raise AssertionError("a connection was left open after close()")
