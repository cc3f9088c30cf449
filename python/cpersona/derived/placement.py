"""Where a derived index keeps its files (docs/architecture.md, "Derived indexes"): beside the
database file (SQLite), or, for a database that is no file of this host's (PostgreSQL,
`capabilities.derived_files == "host_cache"`), in one cache directory per database, shared by
this host's processes (docs/fts-index.md, "On PostgreSQL"). Both index kinds use it."""

from __future__ import annotations

import hashlib
import logging
import os
from pathlib import Path

from cpersona import private_files
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
        private_files.make_dirs(directory)
        note = directory / "database.txt"
        if not note.exists():  # which database this is, for an operator looking at the cache
            private_files.write_atomically(note, url + "\n", fsync=False)
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


#: File systems whose `flock` does not exclude the processes of other hosts, or whose shared
#: mappings other clients do not see written (NFS, SMB, FUSE mounts of remote stores): a cache
#: directory there would let two hosts mutate one index file at once.
NETWORK_FILESYSTEMS = ("nfs", "nfs4", "cifs", "smb3", "smbfs", "9p", "afs", "ceph", "glusterfs")


def cache_problem(cache_dir: str | None) -> str:
    """Why this host's cache root cannot hold index files that the vector arm may scan ("" =
    it can): it must be creatable and lockable (`flock`), on a local file system. Made here if
    missing; a probe lock file is left for the next start."""
    root = cache_root(cache_dir)
    try:
        private_files.make_dirs(root)
        fd = private_files.open_or_create(root / ".lock-probe")
        try:
            import fcntl

            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)
    except OSError as exc:
        return f"the cache directory {root} is unusable ({exc})"
    kind = filesystem_of(root)
    if kind.startswith("fuse.") or kind in NETWORK_FILESYSTEMS:
        return f"the cache directory {root} is on a network file system ({kind}); use a local disk"
    return ""


def filesystem_of(path: Path) -> str:
    """The type of the file system holding `path`, from /proc/self/mountinfo (Linux; "" where
    that cannot be read): the mount point that is the longest prefix of its real path."""
    try:
        with open("/proc/self/mountinfo", encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError:
        return ""
    real = str(path.resolve())
    best, kind = -1, ""
    for line in lines:
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) < 5 or not tail:
            continue
        mount = fields[4].replace("\\040", " ")
        inside = real == mount or real.startswith(mount.rstrip("/") + "/")
        if inside and len(mount) > best:
            best, kind = len(mount), tail[0]
    return kind
