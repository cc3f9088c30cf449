"""Where a derived index keeps its files (docs/architecture.md, "Derived indexes"): beside the
database file (SQLite), or, for a database that is no file of this host's (PostgreSQL,
`capabilities.derived_files == "host_cache"`), in one cache directory per database, shared by
this host's processes (docs/fts-index.md, "On PostgreSQL"). Both index kinds use it."""

from __future__ import annotations

import hashlib
import logging
import os
from pathlib import Path

from cpersona.config import cache_root
from cpersona.storage import Store

log = logging.getLogger("cpersona.fts")


#: On a shared database (PostgreSQL) applied log entries kept beyond the newest this host
#: applied, so that index files on other hosts a little behind can still catch up by replaying
#: rather than rebuild (about 3 MB of log rows).
SHARED_KEEP_LOG = 100_000


def cache_base(cache_dir: str | None, url: str) -> Path:
    """Where this host keeps the full-text index files of the database at `url` (redacted):
    `<CPERSONA_CACHE_DIR or ~/.cache/cpersona>/<hash of url>/index`. The hash covers the whole
    URL (host, port, database, options such as a schema's search_path), so two databases never
    share a file; processes on one host share theirs, each host has its own."""
    directory = cache_directory(cache_dir, url)
    try:
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        note = directory / "database.txt"
        if not note.exists():  # which database this is, for an operator looking at the cache
            tmp = directory / f"database.txt.tmp{os.getpid()}"
            # Owner-only like every file of cpersona's (check_health's file_permissions).
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(url + "\n")
            os.replace(tmp, note)
    except OSError as exc:
        # Serving goes on: each search then says the index is unusable (search.ranked).
        log.warning("the full-text index directory %s is unusable: %s", directory, exc)
    return directory / "index"


def cache_directory(cache_dir: str | None, url: str) -> Path:
    """The directory `cache_base` puts the files in (computed only: nothing is created)."""
    return cache_root(cache_dir) / hashlib.sha256(url.encode("utf-8")).hexdigest()[:16]


def index_base(db: Store, cache_dir: str | None = None) -> Path:
    """The path an index's files are named after (`<base>.<table>.vec`, `<base>.<table>.fts`):
    the database file itself, or `cache_base` where the capabilities say "host_cache"."""
    if db.capabilities.derived_files == "host_cache":
        return cache_base(cache_dir, db.path)
    return Path(db.path)
