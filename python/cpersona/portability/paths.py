"""Where export may write and import may read: `CPERSONA_EXPORT_DIR` confinement (surface.md §8.1).

With an export directory configured, a caller's path is resolved with every symlink followed
(`os.path.realpath`) and must land in that directory; the resolved path is what is used, so a
symlink swapped in later cannot redirect the file. A relative path is taken relative to the
export directory (the caller cannot know the server's working directory). Without one, any
path is accepted except one with a `..` segment. A `..` segment is refused in both modes: a
caller that needs one is escaping, not organising.

Answers name a path as the caller wrote it, never the resolved one, and an OS error by its
reason only (`os_reason`): the server's directories are not the caller's business (issue 11).
"""

from __future__ import annotations

import os
import re
import stat
from typing import Any

_SEGMENTS = re.compile(r"[\\/]")


def confine(path: str, export_dir: str | None) -> str | None:
    """The path to use, or None when `path` must be refused."""
    if not path or "\x00" in path:
        return None
    if ".." in _SEGMENTS.split(path):
        return None
    if export_dir is None:
        return path
    root = os.path.realpath(os.path.expanduser(export_dir))
    candidate = path if os.path.isabs(path) else os.path.join(root, path)
    real = os.path.realpath(candidate)
    inside = real == root or real.startswith(root.rstrip(os.sep) + os.sep)
    return real if inside else None


def refusal(argument: str, path: str) -> str:
    """The refusal text (2.5.x's wording, which callers may match)."""
    return f"{argument} rejected (path traversal or outside export dir): {path}"


def names_directory(path: str, export_dir: str | None) -> bool:
    """Whether the confined `path` is a directory, or the export directory itself (which need
    not exist yet): no file can be written there, and a temp file beside it would land in the
    export directory's parent."""
    if os.path.isdir(path):
        return True
    if export_dir is None:
        return False
    return path == os.path.realpath(os.path.expanduser(export_dir))


def os_reason(exc: OSError) -> str:
    """An OS error without the file names it carries (`str(exc)` shows absolute paths)."""
    return exc.strerror or type(exc).__name__


def read_bounded(path: str, shown: str, cap: int, *, nofollow: bool) -> bytes | dict[str, Any]:
    """The file's bytes, or the refusal (import_memories' `{"ok": false, "error"}`).

    Checks run on the opened descriptor (no stat/open race);
    O_NONBLOCK keeps a FIFO from hanging the open before it is refused. Answers name `shown`,
    the caller's own spelling of `path`."""
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    if nofollow:
        # The path was resolved already: a symlink here was swapped in since.
        flags |= getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        return _failed(f"File not found: {shown}")
    except OSError as exc:
        if nofollow and exc.errno is not None and exc.errno == getattr(os, "ELOOP", -1):
            return _failed(refusal("input_path", shown))
        return _failed(f"could not read {shown}: {os_reason(exc)}")
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return _failed(f"input_path is not a regular file: {shown}")
        if info.st_size > cap:
            return _failed(f"input file exceeds MAX_IMPORT_BYTES ({cap}): {shown}")
        with os.fdopen(fd, "rb", closefd=False) as handle:
            data = handle.read(cap + 1)
    except OSError as exc:
        return _failed(f"could not read {shown}: {os_reason(exc)}")
    finally:
        os.close(fd)
    if len(data) > cap:  # it grew after the stat
        return _failed(f"input file exceeds MAX_IMPORT_BYTES ({cap}): {shown}")
    return data


def _failed(error: str) -> dict[str, Any]:
    return {"ok": False, "error": error}
