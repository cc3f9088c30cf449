"""Where a background rebuild of a derived file says how far it is (issues 20 and 33): the
build lock file `<file>.rebuild`, held with an exclusive `flock` while the rebuild runs and
holding its progress record, read by any process (`cpersona index status`, check_health, the
start-up banner). Kept free of numpy so the banner can read it without slowing the start.
"""

from __future__ import annotations

import fcntl
import json
import os
from dataclasses import dataclass
from pathlib import Path

#: The size of the progress record in the build lock file.
RECORD_LEN = 256


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


def write_progress(fd: int, done: int, total: int, reason: str) -> None:
    """Record a rebuild's progress in its build lock file `fd` (held by this process)."""
    record = {"pid": os.getpid(), "done": done, "total": total, "reason": reason[:150]}
    # One fixed-size write in place: a reader never sees it half-empty.
    os.pwrite(fd, json.dumps(record).encode("utf-8")[:RECORD_LEN].ljust(RECORD_LEN), 0)


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
