"""What a stdio server says on stderr when it starts: what it serves, where the data is, which
embedder, how to register it with an MCP client."""

from __future__ import annotations

import json
import os
from collections.abc import Callable

from cpersona import __version__
from cpersona.config import Settings
from cpersona.credentials import describe
from cpersona.derived.progress import banner_line
from cpersona.storage import database_label


def stdio_banner(settings: Settings, embedder_name: str) -> str:
    """The banner's lines; on PostgreSQL the database is its URL without the password, and the
    registration hint names the variable that selects it."""
    if settings.database_url:
        where = database_label(settings.db_path, settings.database_url)
        env = {"CPERSONA_DATABASE_URL": where}
    else:
        where = settings.db_path
        if where != ":memory:":
            where = os.path.abspath(where)
        env = {"CPERSONA_DB_PATH": where}
    entry = {"mcpServers": {"cpersona": {"command": "cpersona", "env": env}}}
    return "\n".join(
        [
            f"cpersona {__version__}: MCP memory server on stdio (pid {os.getpid()})",
            f"  database: {where}",
            f"  embedder: {embedder_name} (loads on first use)",
            f"  credentials: {describe(settings.secrets)}",
            "  register with an MCP client: " + json.dumps(entry),
        ]
    )


def index_files_line(settings: Settings, count_memories: Callable[[], int]) -> str | None:
    """The banner's line on a SQLite database's index files while they are not built or a
    rebuild runs (derived/progress.py); None on PostgreSQL (no index files) and otherwise."""
    if settings.database_url or settings.db_path == ":memory:":
        return None
    return banner_line(os.path.abspath(settings.db_path), count_memories)
