"""`cpersona web`: serve the read-only view over HTTP until SIGINT/SIGTERM."""

from __future__ import annotations

import logging
import socket
import sys
from typing import TYPE_CHECKING

from cpersona.server.auth import _is_loopback

if TYPE_CHECKING:
    from cpersona.config import Settings
    from cpersona.engine import Engine
    from cpersona.server.acl import AclConfig

log = logging.getLogger("cpersona.web")


def refusal(settings: Settings, acl: AclConfig | None) -> str | None:
    """Why the view must not start, or None: an open view belongs on loopback only."""
    if acl is not None or settings.auth_token or _is_loopback(settings.web_host):
        return None
    if settings.allow_unauthenticated_http:
        return None
    return (
        f"cpersona: refusing to serve the web view on {settings.web_host} without "
        "authentication: set CPERSONA_AUTH_TOKEN (or CPERSONA_ACL_FILE), bind 127.0.0.1, or "
        "set CPERSONA_ALLOW_UNAUTHENTICATED_HTTP=true to show every memory to anyone who can "
        "reach the port"
    )


def serve_web(settings: Settings, acl: AclConfig | None) -> int:
    from cpersona.server.http import _run, endpoint_url
    from cpersona.server.startup import serve_on
    from cpersona.web.app import LOOPBACK_HOSTS, Access, build_web_app

    problem = refusal(settings, acl)
    if problem is not None:
        print(problem, file=sys.stderr)
        return 2

    def serve(sock: socket.socket, engine: Engine) -> int:
        access = Access(None if acl is not None else settings.auth_token, acl)
        url = endpoint_url(settings.web_host, sock.getsockname()[1]).removesuffix("mcp")
        lines = [
            f"cpersona web view (read-only) of {settings.db_path}",
            f"  url: {url}",
        ]
        if not access.open:
            lines.append(f"  open once as: {url}?token=<your token>")
        print("\n".join(lines), file=sys.stderr, flush=True)
        engine.start_index_warmup()
        engine.start_calibration()
        loopback = _is_loopback(settings.web_host) or settings.web_host == "localhost"
        hosts = LOOPBACK_HOSTS if loopback else None
        _run(build_web_app(engine, access, hosts=hosts), sock, settings)
        return 0

    return serve_on(settings, settings.web_host, settings.web_port, serve)
