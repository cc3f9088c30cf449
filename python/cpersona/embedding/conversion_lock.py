"""The conversion lock of a database: the `flock` a model conversion (`cpersona reembed`,
commands/reembed.py) holds on `<db>.reembed.lock` while it runs, so that a second conversion
refuses to start and check_health (health/checks/model.py) can tell a conversion running from
one that stopped half way. Both sides use it from here, neither reads the other's files."""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator

from cpersona import private_files


def lock_path(db_path: str) -> str:
    return db_path + ".reembed.lock"


@contextlib.contextmanager
def exclusive(db_path: str) -> Iterator[bool]:
    """Hold the conversion lock of `db_path`; yields False when another process holds it."""
    fd = private_files.open_or_create(lock_path(db_path))
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)  # closing releases the lock


def running(db_path: str) -> bool:
    """Whether a conversion holds `db_path`'s conversion lock now."""
    path = lock_path(db_path)
    if not os.path.exists(path):
        return False
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False
