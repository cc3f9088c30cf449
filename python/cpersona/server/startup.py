"""What every front (stdio, streamable HTTP, the web view) does before it serves: open the
Engine and bind its port, each failure said in one line on stderr so the command can exit."""

from __future__ import annotations

import socket
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from cpersona.storage import database_label, open_failure_reason

if TYPE_CHECKING:
    from cpersona.config import Settings
    from cpersona.engine import Engine


def serve_on(
    settings: Settings, host: str, port: int, serve: Callable[[socket.socket, Engine], int]
) -> int:
    """Bind host:port, open the Engine, then `serve` on both (its exit code is returned); both
    are closed after. 1 when either cannot be had, the reason printed."""
    sock = bind(host, port)
    if sock is None:
        return 1
    try:
        engine = open_engine(settings)
        if engine is None:
            return 1
        try:
            return serve(sock, engine)
        finally:
            engine.close()
    finally:
        sock.close()


def open_engine(settings: Settings) -> Engine | None:
    """The Engine over the configured database, or None once the reason is printed."""
    from cpersona.engine import Engine

    try:
        return Engine(settings)
    except Exception as exc:  # an unusable database path, a locked or corrupt file
        where = database_label(settings.db_path, settings.database_url)
        reason = open_failure_reason(settings.db_path, settings.database_url, exc)
        print(f"cpersona: cannot open the database {where}: {reason}", file=sys.stderr)
        return None


def bind(host: str, port: int) -> socket.socket | None:
    """A listening socket on host:port (port 0: any free port), or None once the reason is
    printed."""
    try:
        return listen(host, port)
    except OSError as exc:
        print(f"cpersona: cannot listen on {host}:{port}: {exc}", file=sys.stderr)
        return None


def listen(host: str, port: int) -> socket.socket:
    """A listening socket on host:port (port 0: any free port; the banner shows which)."""
    family, kind, proto, _, addr = socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(addr)
        sock.listen(2048)
    except OSError:
        sock.close()
        raise
    return sock
