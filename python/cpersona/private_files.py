"""Files and directories only the database's owner can read, whatever the umask (issue 33).

Everything cpersona writes holds the memories or what leads to them: the database, its index
files (the full-text segment holds every memory's text in plain), exports, backup bundles,
calibration sidecars, handshake records, lock files. Each is created here, owner-only from its
first byte: a file made with the process's umask (0644 under the usual 022) and chmod-ed
after is readable by anyone in between, and a chmod forgotten leaves it readable for good.

- `create` / `open_new`: a new file (never one already there), mode 0600;
- `reserve`: an empty new file for a writer that creates with its own mode (SQLite, the Rust
  extension's `File::create`): they keep the mode of a file that exists;
- `open_or_create`: a file used in place (a lock file, a sidecar rewritten where it is),
  created 0600 where missing (one that exists is used as it is);
- `make_dirs`: a directory and its missing parents, each created 0700 (existing ones are the
  user's and keep their mode);
- `write_atomically` / `copy`: a whole file written beside its target and renamed over it.

A file that already exists keeps its mode (an operator may have widened it on purpose; the
database's own check, `check_health`'s `file_permissions`, reports one readable by others).
"""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path
from typing import IO, Literal, overload

#: The mode of every file cpersona creates.
FILE_MODE = 0o600
#: The mode of every directory cpersona creates.
DIR_MODE = 0o700

StrPath = str | os.PathLike[str]

_NEW = os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


def create(path: StrPath, flags: int = os.O_WRONLY) -> int:
    """A descriptor of a new file at `path`, mode 0600 (FileExistsError if one is there).
    `flags`: the access (os.O_WRONLY, os.O_RDWR) and any other flag but O_CREAT/O_EXCL."""
    fd = os.open(path, flags | _NEW, FILE_MODE)
    try:
        # The umask can only take bits away from 0600; one that takes the owner's own (0o200,
        # 0o400) would leave a file cpersona cannot use again, so the mode is set exactly.
        os.fchmod(fd, FILE_MODE)
    except BaseException:
        os.close(fd)
        raise
    return fd


def recreate(path: StrPath, flags: int = os.O_WRONLY) -> int:
    """`create` after removing whatever is at `path` (a temporary a dead process left)."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    return create(path, flags)


@overload
def open_new(path: StrPath, mode: Literal["wb", "xb"] = "wb") -> IO[bytes]: ...
@overload
def open_new(path: StrPath, mode: Literal["w", "x"]) -> IO[str]: ...
def open_new(path: StrPath, mode: str = "wb") -> IO[bytes] | IO[str]:
    """A new file at `path` (mode 0600) opened for writing: "wb" binary, "w" UTF-8 text with
    "\\n" line ends. FileExistsError if one is there."""
    fd = create(path)
    if "b" in mode:
        return os.fdopen(fd, "wb")
    return os.fdopen(fd, "w", encoding="utf-8", newline="\n")


def reserve(path: StrPath, *, replace: bool = False) -> None:
    """An empty new file at `path`, mode 0600, for another writer to fill (SQLite, the
    extension's writers keep the mode of a file that exists). `replace`: remove any file
    there first."""
    os.close(recreate(path) if replace else create(path))


def open_or_create(path: StrPath, flags: int = os.O_RDWR) -> int:
    """A descriptor of the file at `path` (a lock file, a sidecar rewritten in place), created
    0600 where missing; one that exists is opened as it is."""
    try:
        return create(path, flags)
    except FileExistsError:
        return os.open(path, flags | getattr(os, "O_CLOEXEC", 0))


def make_dirs(path: StrPath) -> Path:
    """`path` as a directory: it and every missing parent created mode 0700 (`Path.mkdir`'s
    `parents` makes the parents with the umask's mode). Returns it as a Path."""
    target = Path(path)
    missing: list[Path] = []
    at = target
    while not at.is_dir():
        missing.append(at)
        if at.parent == at:
            break
        at = at.parent
    for directory in reversed(missing):
        try:
            os.mkdir(directory, DIR_MODE)
        except FileExistsError:
            if not directory.is_dir():
                raise
            continue  # another process made it meanwhile: theirs, as they made it
        os.chmod(directory, DIR_MODE)  # exactly 0700, as `create` does for files
    return target


def _temporary(target: Path) -> Path:
    return target.with_name(f".{target.name}.tmp{os.getpid()}")


def write_atomically(path: StrPath, data: bytes | str, *, fsync: bool = True) -> None:
    """`data` as the whole content of `path` (mode 0600, its directory made where missing):
    written beside it, then renamed over it, so a reader sees the old file or the new one."""
    target = Path(path)
    make_dirs(target.parent)
    tmp = _temporary(target)
    try:
        with os.fdopen(recreate(tmp), "wb") as out:
            out.write(data.encode("utf-8") if isinstance(data, str) else data)
            if fsync:
                out.flush()
                os.fsync(out.fileno())
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def copy(source: StrPath, path: StrPath) -> None:
    """A private copy of `source` at `path` (written beside it, then renamed over it)."""
    target = Path(path)
    make_dirs(target.parent)
    tmp = _temporary(target)
    try:
        with open(source, "rb") as src, os.fdopen(recreate(tmp), "wb") as dst:
            shutil.copyfileobj(src, dst)
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
