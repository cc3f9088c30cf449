"""Where a background rebuild of a derived file says how far it is (issues 20 and 33): the
build lock file `<file>.rebuild`, held with an exclusive `flock` while the rebuild runs and
holding its progress record, read by any process (`cpersona index status`, check_health, the
start-up banner). Kept free of numpy so the banner can read it without slowing the start.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

#: A file to rebuild whose table holds at most this many rows is rebuilt inside the call that
#: found it (a few tens of ms); a larger one in the background, the database answering meanwhile.
INLINE_ROWS = 2000
#: The size of the progress record in the build lock file.
RECORD_LEN = 256
#: The derived files of a SQLite database, beside it: `<db>.<table>.<kind>`.
DERIVED_FILES = (
    ("memories", "vec", "vectors"),
    ("memories", "fts", "full text"),
    ("episodes", "vec", "vectors"),
    ("episodes", "fts", "full text"),
)


@dataclass(frozen=True, slots=True)
class RebuildProgress:
    """A background rebuild under way on this host, as its build lock file says."""

    pid: int
    done: int
    total: int
    reason: str

    def describe(self) -> str:
        pct = 100.0 * self.done / self.total if self.total else 0.0
        return (
            f"rebuilding in the background (process {self.pid}, {self.reason}): "
            f"{self.done}/{self.total} rows ({pct:.0f}%)"
        )


def build_lock_path(path: Path) -> Path:
    """The file a background rebuild of `path` holds an exclusive `flock` on while it runs,
    holding its progress: one rebuild per host, and none left behind by a crash (the lock
    goes with the process)."""
    return Path(f"{path}.rebuild")


def progress_of(path: Path) -> RebuildProgress | None:
    """The background rebuild of `path` running on this host (in any process), or None."""
    try:
        fd = os.open(build_lock_path(path), os.O_RDONLY)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:  # held: a rebuild runs; its progress is the file's content
            raw = os.pread(fd, 4096, 0)
        else:
            fcntl.flock(fd, fcntl.LOCK_UN)
            return None
    finally:
        os.close(fd)
    try:
        got = json.loads(raw.decode("utf-8").strip() or "{}")
        return RebuildProgress(
            int(got["pid"]), int(got["done"]), int(got["total"]), str(got["reason"])
        )
    except (ValueError, KeyError, TypeError):  # the instant before its first step or after its last
        return RebuildProgress(0, 0, 0, "starting")


def banner_line(db_path: str, memories: Callable[[], int]) -> str | None:
    """The start-up banner's line on the index files of the SQLite database at `db_path`:
    a rebuild running on this host and how far it is, or the files not built yet (what a
    database written by CPersona 2.5.x brings), with what that means for the first recalls
    and how to build them ahead. None when they are built, or the database is small enough
    to build them inside the first call (`memories()` counts its memories, asked only when
    a file is missing)."""
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
    count = memories() if missing else 0
    if count > INLINE_ROWS:
        return (
            f"  index files: not built yet ({', '.join(missing)} of {count:,} memories); the "
            "first call starts building them in the background and recalls answer from the "
            "database meanwhile, slower (`cpersona index rebuild` builds them ahead; "
            "`cpersona index status` shows how far it is)"
        )
    return None
