"""The `cpersona` command: `serve` (the default), `--version`, `--help`."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence

from cpersona import __version__
from cpersona.config import Settings
from cpersona.errors import ConfigError

log = logging.getLogger("cpersona")

REGISTER_HINT = (
    'register with an MCP client: {"mcpServers": {"cpersona": {"command": "cpersona", '
    '"env": {"CPERSONA_DB_PATH": "%s"}}}}'
)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="cpersona",
        description="Persistent memory for LLM agents, served over MCP. With no command, serves "
        "MCP on stdio. Settings come from CPERSONA_* environment variables (see README).",
    )
    parser.add_argument("--version", action="version", version=f"cpersona {__version__}")
    sub = parser.add_subparsers(dest="command")
    serve = sub.add_parser(
        "serve", help="serve MCP (stdio unless CPERSONA_TRANSPORT says otherwise)"
    )
    serve.add_argument(
        "--transport",
        choices=("stdio", "streamable-http"),
        help="override CPERSONA_TRANSPORT",
    )
    index = sub.add_parser("index", help="inspect or repair the vector index files")
    index.add_argument("action", choices=("status", "rebuild", "verify"))
    index.add_argument("--table", choices=("memories", "episodes"), help="default: both")
    export = sub.add_parser("export", help="write a JSONL backup (export_memories)")
    export.add_argument("path")
    export.add_argument("--agent", default="", help="one agent (default: every agent)")
    export.add_argument("--embeddings", action="store_true", help="include stored vectors")
    restore = sub.add_parser("import", help="read a JSONL backup back (import_memories)")
    restore.add_argument("path")
    restore.add_argument("--agent", default="", help="write every record under this agent")
    restore.add_argument("--dry-run", action="store_true", help="count without writing")
    return parser


def _configure_logging(level: str) -> None:
    from cpersona.logs import configure

    configure(level)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        settings = Settings.from_env()
    except ConfigError as exc:
        print(f"cpersona: {exc}", file=sys.stderr)
        return 2
    _configure_logging(settings.log_level)
    command = args.command or "serve"
    if command == "serve":
        transport = getattr(args, "transport", None) or settings.transport
        return _serve(settings, transport)
    if command == "index":
        from cpersona.vectors.cli import run_index_command

        return run_index_command(settings, args.action, args.table)
    if command in ("export", "import"):
        from cpersona.portability import commands

        if command == "export":
            return commands.run_export(settings, args.path, args.agent, args.embeddings)
        return commands.run_import(settings, args.path, args.agent, args.dry_run)
    return 2


def _serve(settings: Settings, transport: str) -> int:
    import dataclasses

    from cpersona.server.acl import LOCAL, Guard, load_acl

    settings = dataclasses.replace(settings, transport=transport)
    # ACL mode is loaded first and any defect refuses start-up, on both transports (§14.2).
    acl = None
    if settings.acl_file:
        try:
            acl = load_acl(settings.acl_file)
        except ConfigError as exc:
            print(f"cpersona: {exc}", file=sys.stderr)
            return 2
        if settings.auth_token:
            log.warning(
                "CPERSONA_AUTH_TOKEN is ignored in ACL mode (CPERSONA_ACL_FILE); "
                "to keep using that token, list it as a client in the ACL file"
            )
    if transport == "streamable-http":
        from cpersona.server.http import serve_http

        return serve_http(settings, acl)
    from cpersona.server.stdio import serve_stdio

    if acl is None:
        return serve_stdio(settings)
    # stdio calls run as the reserved principal `local` (surface.md §11.4).
    guard = Guard(acl, lambda: LOCAL, export_dir_set=bool(settings.export_dir))
    return serve_stdio(settings, authorize=guard)


def banner(settings: Settings, embedder_name: str) -> str:
    db = settings.db_path if settings.db_path == ":memory:" else os.path.abspath(settings.db_path)
    return "\n".join(
        [
            f"cpersona {__version__}: MCP memory server on stdio (pid {os.getpid()})",
            f"  database: {db}",
            f"  embedder: {embedder_name} (loads on first use)",
            "  " + REGISTER_HINT % db,
        ]
    )
