"""Serving over streamable HTTP: one process, many clients, one Engine (surface.md §11.1).

The SDK's streamable-HTTP app in stateless mode (no session outlives its request), reachable at
`/mcp` and at any other path, under three layers of middleware, outermost first: CORS, the
request body budget, authentication (`auth.py`); `GET /metrics` is the Prometheus scrape
(`metrics.py`), not MCP. Tool calls from all clients run in worker threads against the shared
Engine, whose storage serialises writers and gives each thread its own reader. In ACL mode
(`acl.py`) the outer dispatch asks the guard before any handler runs.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import sys
import threading
from typing import TYPE_CHECKING, Any

from mcp.server.transport_security import TransportSecuritySettings
from starlette.middleware.cors import CORSMiddleware
from starlette.types import ASGIApp, Receive, Scope, Send

from cpersona import __version__
from cpersona.credentials import describe
from cpersona.errors import ConfigError
from cpersona.server.auth import BearerAuth, BodyBudget, current_client
from cpersona.server.banner import index_files_line
from cpersona.server.jsonrpc import JsonRpcGuard
from cpersona.server.metrics import MetricsRoute
from cpersona.server.startup import serve_on

if TYPE_CHECKING:
    from mcp.server.lowlevel.server import Server

    from cpersona.config import Settings
    from cpersona.engine import Engine
    from cpersona.server.acl import AclConfig, Authorize
    from cpersona.server.metrics import Metrics
    from cpersona.server.oauth import OAuthConfig
    from cpersona.server.subjects import AliasLedger

log = logging.getLogger("cpersona.http")

MCP_PATH = "/mcp"
CORS_ORIGINS = ("https://claude.ai", "https://www.claude.ai")
_LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")


def serve_http(
    settings: Settings,
    acl: AclConfig | None,
    *,
    oauth: OAuthConfig | None = None,
    ledger: AliasLedger | None = None,
) -> int:
    """Run until SIGINT/SIGTERM. `acl`, `oauth` and `ledger` were loaded by the caller.

    Returns the process exit code: 0 after a clean stop, 1 when the port or the database
    cannot be opened, 2 when the configuration refuses to serve.
    """
    from cpersona.server.acl import Guard
    from cpersona.server.app import build_server
    from cpersona.server.auth import preflight_refusal
    from cpersona.server.metrics import server_metrics

    refusal = preflight_refusal(settings, acl)
    if refusal is not None:  # before the database or the embedder is touched (§14.2 step 3)
        print(refusal, file=sys.stderr)
        return 2
    if acl is None and not settings.auth_token:
        log.warning(
            "serving HTTP WITHOUT authentication (CPERSONA_ALLOW_UNAUTHENTICATED_HTTP=true): "
            "anyone who can reach %s:%d can read and write every agent's memories",
            settings.http_host,
            settings.http_port,
        )
    if not logging.getLogger().isEnabledFor(logging.DEBUG):
        # The SDK logs every stateless request's end at INFO: one line per tool call.
        logging.getLogger("mcp.server.streamable_http").setLevel(logging.WARNING)

    def serve(sock: socket.socket, engine: Engine) -> int:
        guard: Authorize | None = None
        if acl is not None:
            guard = Guard(acl, current_client, export_dir_set=bool(settings.export_dir))
            if ledger is not None:  # per-subject mode (server/subjects.py)
                from cpersona.server.subjects import per_subject_guard

                try:
                    guard = per_subject_guard(guard, ledger, engine.db)
                except ConfigError as exc:  # the database holds reserved agent ids
                    print(f"cpersona: {exc}", file=sys.stderr)
                    return 2
        url = endpoint_url(settings.http_host, sock.getsockname()[1])
        print(http_banner(settings, engine.embedder.name, url, acl), file=sys.stderr, flush=True)
        index_line = index_files_line(settings, engine.count_memories)
        if index_line is not None:
            print(index_line, file=sys.stderr, flush=True)
        notice = engine.router.notice()
        if notice is not None:  # the stored vectors are another model's (one line)
            print(notice, file=sys.stderr, flush=True)
        metrics = server_metrics(engine)
        server = build_server(engine, authorize=guard, metrics=metrics)
        engine.start_index_warmup()
        engine.start_calibration()
        engine.tasks.start()  # drains legacy pending_memory_tasks rows (§9.6)
        # Start-up read on this thread, the event loop's from now on: a reader bound to it
        # for good would keep the idle readers from ever being recycled (storage/db.py).
        engine.db.release_reader()
        _run(build_app(server, settings, acl, metrics, oauth=oauth), sock, settings)
        return 0

    return serve_on(settings, settings.http_host, settings.http_port, serve)


def build_app(
    server: Server[Any],
    settings: Settings,
    acl: AclConfig | None,
    metrics: Metrics | None = None,
    *,
    oauth: OAuthConfig | None = None,
) -> ASGIApp:
    """The whole ASGI stack: CORS → body budget → [OAuth metadata] → authentication → JSON-RPC
    guard → the SDK's app.

    `GET /metrics` is answered just inside authentication, or just outside it when
    CPERSONA_METRICS_PUBLIC=true (server/metrics.py).
    """
    sdk_app = server.streamable_http_app(
        streamable_http_path=MCP_PATH,
        stateless_http=True,
        transport_security=_transport_security(settings.http_host),
        # BodyBudget below is the one limit (with the spec's modes and 413 body); the SDK's
        # own check would refuse in warn and off mode too.
        max_request_body_size=sys.maxsize,
    )
    app: ASGIApp = _AnyPath(sdk_app)
    app = JsonRpcGuard(app)  # after authentication: no body is read for an unknown caller
    if metrics is not None and not settings.metrics_public:
        app = MetricsRoute(app, metrics)
    if oauth is None:
        app = BearerAuth(app, token=settings.auth_token, acl=acl)
    else:  # server/oauth.py: the metadata document, the challenge, JWT verification
        from cpersona.server.oauth import ResourceMetadata
        from cpersona.server.oauth_tokens import Verifier

        verifier = Verifier(oauth, acl) if acl is not None and oauth.verify else None
        app = BearerAuth(
            app, token=settings.auth_token, acl=acl, oauth=verifier, challenge=oauth.challenge()
        )
    if metrics is not None and settings.metrics_public:
        app = MetricsRoute(app, metrics)
    if oauth is not None:
        app = ResourceMetadata(app, oauth)
    app = BodyBudget(
        app, max_bytes=settings.http_max_body_bytes, mode=settings.http_body_limit_mode
    )
    return CORSMiddleware(
        app,
        allow_origins=list(CORS_ORIGINS),
        allow_methods=["GET", "POST", "DELETE", "OPTIONS"],
        allow_headers=[
            "Authorization",
            "Content-Type",
            "Mcp-Session-Id",
            "Mcp-Protocol-Version",
            "Last-Event-Id",
        ],
        expose_headers=["Mcp-Session-Id"],
    )


def _transport_security(host: str) -> TransportSecuritySettings | None:
    # The SDK's own default (DNS-rebinding protection on a loopback bind), with the CORS
    # origins admitted too so a browser client that CORS lets in is not refused one layer down.
    if host not in _LOOPBACK_HOSTS:
        return None
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=["127.0.0.1:*", "localhost:*", "[::1]:*"],
        allowed_origins=[
            "http://127.0.0.1:*",
            "http://localhost:*",
            "http://[::1]:*",
            *CORS_ORIGINS,
        ],
    )


class _AnyPath:
    """Serves the MCP endpoint at every path, as CPersona 2.5.x does (`/mcp` and `/`)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope.get("path") != MCP_PATH:
            scope = {**scope, "path": MCP_PATH, "raw_path": MCP_PATH.encode("ascii")}
        await self.app(scope, receive, send)


class _Terminated(Exception):
    """SIGTERM, turned into an exception so the Engine is closed on the way out."""


def _on_sigterm(signum: int, frame: object) -> None:
    raise _Terminated


def _run(app: ASGIApp, sock: socket.socket, settings: Settings) -> None:
    import uvicorn

    from cpersona.server.connections import uvicorn_config

    config = uvicorn_config(app, settings)  # timeouts and the connection bound live there
    # uvicorn shuts down gracefully on SIGTERM, then re-raises the signal under the handler it
    # found; with the default one the process would die before the database is closed.
    main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _on_sigterm) if main else None
    try:
        uvicorn.Server(config).run(sockets=[sock])
    except (KeyboardInterrupt, _Terminated):
        pass
    finally:
        if main:
            signal.signal(signal.SIGTERM, previous)


def endpoint_url(host: str, port: int) -> str:
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}{MCP_PATH}"


def http_banner(settings: Settings, embedder_name: str, url: str, acl: AclConfig | None) -> str:
    """What the server serves, where, and how to register it (stderr; never the token)."""
    db = settings.db_path if settings.db_path == ":memory:" else os.path.abspath(settings.db_path)
    entry: dict[str, Any] = {"type": "http", "url": url}
    if acl is not None:
        auth = f"ACL file {acl.path} ({len(acl.clients)} clients)"
        if settings.auth_token:
            auth += "; CPERSONA_AUTH_TOKEN is ignored"
        entry["headers"] = {"Authorization": "Bearer <that client's token from the ACL file>"}
    elif settings.auth_token:
        auth = "bearer token (CPERSONA_AUTH_TOKEN)"
        entry["headers"] = {"Authorization": "Bearer <the value of CPERSONA_AUTH_TOKEN>"}
    else:
        auth = "NONE (CPERSONA_ALLOW_UNAUTHENTICATED_HTTP=true)"
    lines = [
        f"cpersona {__version__}: MCP memory server on streamable HTTP (pid {os.getpid()})",
        f"  url: {url}",
        f"  auth: {auth}",
        f"  database: {db}",
        f"  embedder: {embedder_name} (loads on first use)",
        f"  credentials: {describe(settings.secrets)}",
        "  register with an MCP client: "
        + json.dumps({"mcpServers": {"cpersona": entry}}, ensure_ascii=False),
    ]
    if settings.http_host not in _LOOPBACK_HOSTS:
        lines.insert(2, f"  listening on {settings.http_host}: reachable beyond this machine")
    return "\n".join(lines)
