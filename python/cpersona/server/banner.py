"""What a server says on stderr when it starts: what it serves, where the data is, which
embedder, how to register it with an MCP client (stdio), and how far its index files are."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

from cpersona import __version__
from cpersona.config import Settings
from cpersona.credentials import describe
from cpersona.derived import healing
from cpersona.derived.progress import progress_of
from cpersona.storage import database_label

#: The derived files of a SQLite database, beside it: `<db>.<table>.<suffix>` (named here, not
#: through the index kinds, whose modules import numpy: the banner comes before it).
DERIVED_FILES = (
    ("memories", "vec", "vectors"),
    ("memories", "fts", "full text"),
    ("episodes", "vec", "vectors"),
    ("episodes", "fts", "full text"),
)


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
    """The banner's line on a SQLite database's index files: a rebuild running on this host and
    how far it is, or the files not built yet (what a database written by CPersona 2.5.x
    brings), with what that means for the first recalls and how to build them ahead. None on
    PostgreSQL (no index files beside the database), when they are built, or when the database
    is small enough to build them inside the first call (`count_memories()` is asked only
    when a file is missing)."""
    if settings.database_url or settings.db_path == ":memory:":
        return None
    db_path = os.path.abspath(settings.db_path)
    running, missing = [], []
    for table, suffix, kind in DERIVED_FILES:
        path = Path(f"{db_path}.{table}.{suffix}")
        progress = progress_of(path)
        if progress is not None:
            pct = 100.0 * progress.done / progress.total if progress.total else 0.0
            running.append(
                f"{table} {kind} {progress.done:,}/{progress.total:,} rows ({pct:.0f}%, "
                f"process {progress.pid})"
            )
        elif table == "memories" and not path.exists():
            missing.append(kind)
    if running:
        return "  index files: rebuilding in the background: " + "; ".join(running)
    count = count_memories() if missing else 0
    if count > healing.INLINE_ROWS:
        return (
            f"  index files: not built yet ({', '.join(missing)} of {count:,} memories); the "
            "first call starts building them in the background and recalls answer from the "
            "database meanwhile, slower (`cpersona index rebuild` builds them ahead; "
            "`cpersona index status` shows how far it is)"
        )
    return None
