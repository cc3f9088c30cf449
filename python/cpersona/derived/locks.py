"""The file locks of a derived index, and the repair of an empty directory standing where one of
its files belongs (issue 11)."""

from __future__ import annotations

import fcntl
import logging
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

from cpersona import private_files
from cpersona.errors import IndexObstructed

log = logging.getLogger("cpersona.derived")

_T = TypeVar("_T")


@contextmanager
def file_lock(lock_path: Path, exclusive: bool) -> Iterator[None]:
    """`flock` on `lock_path`: exclusive to change the index file, shared to read it.

    flock is per open file description, so threads of one process take the index's thread lock
    first for exclusive work (two threads must not both mutate through one process)."""
    fd = unobstructed(lambda: private_files.open_or_create(lock_path))
    try:
        fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def unobstructed(act: Callable[[], _T]) -> _T:
    """`act()` on a path of ours (the index file, its lock file); an empty directory standing
    there is removed and `act` tried once more, one with contents is `IndexObstructed`."""
    try:
        return act()
    except IsADirectoryError as exc:
        path = Path(exc.filename2 or exc.filename)
    try:
        path.rmdir()
    except FileNotFoundError:
        pass
    except OSError:
        raise obstructed(path) from None
    else:
        log.warning("removed an empty directory that stood where %s belongs", path.name)
    try:
        return act()
    except IsADirectoryError:  # it came back between the two tries
        raise obstructed(path) from None


def obstructed(path: Path) -> IndexObstructed:
    return IndexObstructed(
        f"{path} is a directory with contents, where cpersona's index keeps a file; "
        "cpersona does not delete it: move it away, and the index is rebuilt on the next use "
        "(recall reads SQLite until then)"
    )
