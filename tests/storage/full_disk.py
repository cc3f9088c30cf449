"""A small filesystem that fills up, for the full-disk tests (issue 11).

Where the test may mount (root, as in CI), a real tmpfs of `SIZE` is mounted in the test's
temporary directory, filled with a file that takes every free block, and always unmounted
(lazily if busy). Elsewhere the same steps are simulated: SQLite's `max_page_count` stops the
database growing (it then fails exactly as on a full disk: SQLITE_FULL) and the index's block
allocation raises ENOSPC. Which one ran is in `Disk.real`, decided at run time.
"""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from cpersona.engine import Engine
from cpersona.vectors import format as vector_format

SIZE = "16m"


class Disk:
    def __init__(self, path: Path, real: bool) -> None:
        self.path = path
        self.real = real
        self.patch = pytest.MonkeyPatch()
        self._filler = path / "filler"

    def fill(self, engine: Engine | None = None) -> None:
        """Take every free block (simulated: freeze the database's size, refuse allocations)."""
        if self.real:
            fd = os.open(self._filler, os.O_WRONLY | os.O_CREAT, 0o600)
            try:
                for size in (1 << 20, 1 << 16, 4096, 512, 1):
                    with contextlib.suppress(OSError):
                        while True:
                            os.write(fd, bytes(size))
            finally:
                os.close(fd)
            return
        if engine is not None:
            conn = engine.db.write_connection()
            pages = conn.execute("PRAGMA page_count").fetchone()[0]
            conn.execute(f"PRAGMA max_page_count={pages}")

        def no_space(fd: int, length: int) -> None:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

        self.patch.setattr(vector_format, "_allocate", no_space)

    def free(self, engine: Engine | None = None) -> None:
        if self.real:
            self._filler.unlink()
            return
        if engine is not None:
            engine.db.write_connection().execute("PRAGMA max_page_count=4294967294")
        self.patch.undo()


def _mount(path: Path) -> bool:
    try:
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={SIZE},mode=0700", "tmpfs", str(path)],
            capture_output=True,
            timeout=30,
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0


def _unmount(path: Path) -> None:
    done = subprocess.run(["umount", str(path)], capture_output=True, timeout=30)
    if done.returncode != 0:  # something still holds it: detach now, freed when released
        subprocess.run(["umount", "-l", str(path)], check=True, timeout=30)


@contextlib.contextmanager
def small_disk(root: Path, *, simulate: bool = False) -> Iterator[Disk]:
    """A tmpfs where one can be mounted (unless `simulate`), else the simulation."""
    path = root / "disk"
    path.mkdir()
    disk = Disk(path, not simulate and _mount(path))
    try:
        yield disk
    finally:
        disk.patch.undo()
        if disk.real:
            _unmount(path)
