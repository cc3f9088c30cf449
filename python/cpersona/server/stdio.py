"""Serving over stdio: one process per MCP client, possibly several on one database file."""

from __future__ import annotations

import logging
import sys
import threading

import anyio
from mcp.server.stdio import stdio_server

from cpersona.config import Settings
from cpersona.engine import Engine

log = logging.getLogger("cpersona")


def serve_stdio(settings: Settings) -> int:
    from cpersona.cli import banner
    from cpersona.server.app import build_server

    try:
        engine = Engine(settings)
    except Exception as exc:  # an unusable database path, a locked or corrupt file
        print(f"cpersona: cannot open the database {settings.db_path}: {exc}", file=sys.stderr)
        return 1
    print(banner(settings, engine.embedder.name), file=sys.stderr, flush=True)
    server = build_server(engine)
    threading.Thread(target=engine.warm_indexes, name="cpersona-index", daemon=True).start()

    async def run() -> None:
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())

    try:
        anyio.run(run)
    except KeyboardInterrupt:
        pass
    finally:
        engine.close()
    return 0
