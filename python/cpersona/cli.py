"""The `cpersona` command: `serve` (the default), `index`, `export`/`import`, `backup`/`restore`,
`reembed`, `migrate`, `--version`, `--help`."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from cpersona import __version__
from cpersona.commands.environment import settings_from_env
from cpersona.config import Settings
from cpersona.errors import ConfigError

if TYPE_CHECKING:
    from cpersona.server.acl import AclConfig

log = logging.getLogger("cpersona")


def _port(text: str) -> int:
    """A TCP port, 0 (any free one) to 65535, as CPERSONA_WEB_PORT is checked: the kernel
    would otherwise bind 70000 as 4464 without a word."""
    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port (0 to 65535)")
    return port


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
    sub.add_parser(
        "proxy",
        help="relay MCP on stdio to a cpersona HTTP server (CPERSONA_REMOTE_URL, "
        "CPERSONA_AUTH_TOKEN); the same as python -m cpersona.proxy_stdio",
    )
    web = sub.add_parser(
        "web",
        help="serve a read-only web view of the memory (CPERSONA_WEB_HOST, CPERSONA_WEB_PORT)",
    )
    web.add_argument("--host", help="override CPERSONA_WEB_HOST (default 127.0.0.1)")
    web.add_argument("--port", type=_port, help="override CPERSONA_WEB_PORT (default 8403)")
    index = sub.add_parser("index", help="inspect or repair the vector and full-text index files")
    index.add_argument("action", choices=("status", "rebuild", "verify"))
    index.add_argument("--table", choices=("memories", "episodes"), help="default: both")
    index.add_argument(
        "--kind", choices=("vector", "fulltext", "all"), default="all", help="default: all"
    )
    export = sub.add_parser("export", help="write a JSONL backup (export_memories)")
    export.add_argument("path")
    export.add_argument("--agent", default="", help="one agent (default: every agent)")
    export.add_argument("--embeddings", action="store_true", help="include stored vectors")
    restore = sub.add_parser("import", help="read a JSONL backup back (import_memories)")
    restore.add_argument("path")
    restore.add_argument("--agent", default="", help="write every record under this agent")
    restore.add_argument("--dry-run", action="store_true", help="count without writing")
    backup = sub.add_parser(
        "backup", help="write a consistent backup bundle (database, sidecar, ACL, OC file)"
    )
    backup.add_argument("dest", help="a new (or empty) directory for the bundle")
    backup.add_argument("--db", help="the database (default: $CPERSONA_DB_PATH)")
    restore_bundle = sub.add_parser("restore", help="restore a backup bundle into a database")
    restore_bundle.add_argument("bundle", help="the bundle directory `cpersona backup` wrote")
    restore_bundle.add_argument("--db", required=True, help="the database file to restore into")
    restore_bundle.add_argument(
        "--force", action="store_true", help="replace a database (or file) that holds data"
    )
    restore_bundle.add_argument("--acl-file", help="also restore the bundle's ACL file here")
    restore_bundle.add_argument(
        "--operating-context-path", help="also restore the bundle's operating-context file here"
    )
    reembed = sub.add_parser(
        "reembed",
        help="convert the stored vectors to the configured embedding model, in place "
        "(resumable; the old vectors serve until every row has its new one)",
    )
    reembed.add_argument(
        "--dry-run", action="store_true", help="say how many rows and how long; change nothing"
    )
    reembed.add_argument(
        "--batch", type=int, default=64, help="rows embedded and committed together (default 64)"
    )
    migrate = sub.add_parser(
        "migrate",
        help="copy the whole database to PostgreSQL or to an SQLite file, then verify it "
        "(resumable: rerun the same command after an interruption)",
    )
    migrate.add_argument("--to", required=True, help="postgresql://... URL or a database file")
    migrate.add_argument(
        "--from",
        dest="source",
        help="the database to copy (default: CPERSONA_DATABASE_URL, else CPERSONA_DB_PATH)",
    )
    migrate.add_argument(
        "--force",
        action="store_true",
        help="replace the rows of a target that holds data or another migration",
    )
    migrate.add_argument(
        "--batch", type=int, default=1000, help="rows copied per transaction (default 1000)"
    )
    migrate.add_argument(
        "--sample",
        type=int,
        default=1000,
        help="rows per table compared field by field at the end (default 1000)",
    )
    return parser


def _configure_logging(level: str) -> None:
    from cpersona.logs import configure

    configure(level)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    settings = settings_from_env("cpersona")
    if settings is None:
        return 2
    _configure_logging(settings.log_level)
    command = args.command or "serve"
    if command == "serve":
        transport = getattr(args, "transport", None) or settings.transport
        return _serve(settings, transport)
    if command == "proxy":
        from cpersona.commands.proxy import run

        return run(settings)
    if command == "web":
        return _web(settings, args.host, args.port)
    if command == "index":
        from cpersona.commands.index import run_index_command

        return run_index_command(settings, args.action, args.table, args.kind)
    if command == "reembed":
        from cpersona.commands.reembed import run_reembed

        return run_reembed(settings, dry_run=args.dry_run, batch=args.batch)
    if command == "migrate":
        from cpersona.commands.migrate import run_migrate

        return run_migrate(
            settings,
            args.to,
            args.source,
            force=args.force,
            batch=args.batch,
            sample=args.sample,
        )
    if command in ("export", "import"):
        from cpersona.commands import portability as commands

        if command == "export":
            return commands.run_export(settings, args.path, args.agent, args.embeddings)
        return commands.run_import(settings, args.path, args.agent, args.dry_run)
    if command == "backup":
        from cpersona.commands.bundle import run_backup

        return run_backup(settings, args.dest, args.db)
    if command == "restore":
        from cpersona.commands.bundle import run_restore

        return run_restore(
            args.bundle,
            args.db,
            force=args.force,
            acl_file=args.acl_file,
            operating_context_path=args.operating_context_path,
        )
    return 2


def _load_acl(settings: Settings) -> AclConfig | int | None:
    """The ACL file when one is configured; an exit code when it is unusable."""
    from cpersona.server.acl import load_acl

    if not settings.acl_file:
        return None
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
    return acl


def _web(settings: Settings, host: str | None, port: int | None) -> int:
    import dataclasses

    from cpersona.web.serve import serve_web

    settings = dataclasses.replace(
        settings,
        web_host=host if host is not None else settings.web_host,
        web_port=port if port is not None else settings.web_port,
    )
    acl = _load_acl(settings)
    if isinstance(acl, int):
        return acl
    return serve_web(settings, acl)


def _serve(settings: Settings, transport: str) -> int:
    import dataclasses

    from cpersona.server.acl import LOCAL, Guard
    from cpersona.server.oauth import load_oauth, warn_unreachable_clients
    from cpersona.server.subjects import AliasLedger, ledger_path

    settings = dataclasses.replace(settings, transport=transport)
    # ACL mode is loaded first and any defect refuses start-up, on both transports (§14.2),
    # then the alias ledger of per-subject clients and (HTTP only) the OAuth settings.
    acl = _load_acl(settings)
    if isinstance(acl, int):
        return acl
    oauth = ledger = None
    try:
        if acl is not None and acl.per_subject:
            ledger = AliasLedger.load(ledger_path(settings))
        if transport == "streamable-http":
            oauth = load_oauth(settings, acl)
    except ConfigError as exc:
        print(f"cpersona: {exc}", file=sys.stderr)
        return 2
    if acl is not None:
        warn_unreachable_clients(acl, oauth)
    if transport == "streamable-http":
        from cpersona.server.http import serve_http

        return serve_http(settings, acl, oauth=oauth, ledger=ledger)
    from cpersona.server.stdio import serve_stdio

    if acl is None:
        return serve_stdio(settings)
    # stdio calls run as the reserved principal `local` (surface.md §11.4).
    guard = Guard(acl, lambda: LOCAL, export_dir_set=bool(settings.export_dir))
    return serve_stdio(settings, authorize=guard, ledger=ledger)
