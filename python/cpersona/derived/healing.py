"""Background rebuilds of the derived index files (issues 20 and 21): the `Healer` that runs
them for the vector index and the full-text index alike, and the progress it leaves where any
process can read it.

A file that is damaged (a scan refuses bytes that no longer match their checksum), missing or
stale (another format, another point of the database's history, a writer that died) is handed
to `Healer.start` while the call answers from the database (the chunked BLOB scan, FTS5): no
call waits for a rebuild of more than `INLINE_ROWS` rows. The rebuild (the derived-index
base's `_rebuild_online`, derived/base.py) writes the rows into a private file without the
index lock, so neither this process's calls nor another process's scans wait for it; only the
catch-up with what was logged meanwhile and the rename run under the exclusive lock. One
process per host builds (the build lock, `build_lock_path`); it gives way to tool calls between
steps (yielding.py) and writes its progress where `cpersona index status` and check_health read
it (`progress_of`).
"""

from __future__ import annotations

import contextlib
import fcntl
import glob
import json
import logging
import os
import re
import threading
import time
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass, field
from pathlib import Path

from cpersona import private_files
from cpersona.errors import IndexObstructed, StoreCorrupt
from cpersona.yielding import POLL_SECONDS, CallActivity, GiveWay

#: A file to rebuild whose table holds at most this many rows is rebuilt inside the call that
#: found it (a few tens of ms); a larger one in the background, the database answering meanwhile.
INLINE_ROWS = 2000
#: Rows between two steps of a background rebuild (progress, giving way to calls, stopping).
STEP_ROWS = 1024
#: The size of the progress record in the build lock file.
RECORD_LEN = 256


class RebuildStopped(Exception):
    """The index is closing: a background rebuild stops between two steps (its private file
    is removed; the next use starts again)."""


@dataclass(frozen=True, slots=True)
class RebuildProgress:
    """A background rebuild under way on this host, as its build lock file says (any process
    can read it: `cpersona index status`, check_health)."""

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


Step = Callable[[int, int], None]


@dataclass(eq=False)
class Healer:
    """The background rebuild of one derived file (the vector index and the full-text index
    alike): at most one per process, and one per host through the build lock; another
    process that finds the file unusable waits for that lock while its calls answer from
    the database, then uses the file the first one installed.

    `rebuild(step)` builds the file and calls `step(done, total)` every few rows: the step
    records the progress (the build lock file, the log every tenth), gives way to the tool
    calls in flight (`yielding.GiveWay` over `activity`) and raises `RebuildStopped` once
    the index closes. `needed()` says why the file still needs a rebuild ("" = it does not):
    asked after waiting for another process's rebuild."""

    path: Path
    rebuild: Callable[[Step], int]
    logger: logging.Logger
    _: KW_ONLY
    needed: Callable[[], str] = lambda: "unusable"
    activity: CallActivity | None = None
    _thread: threading.Thread | None = field(init=False, default=None)
    _guard: threading.Lock = field(init=False, default_factory=threading.Lock)
    _stopping: threading.Event = field(init=False, default_factory=threading.Event)

    @property
    def running(self) -> bool:
        thread = self._thread
        return thread is not None and thread.is_alive()

    def start(self, reason: str, *, damaged: bool = True) -> bool:
        """Start the rebuild, saying once why; False when one is already running here."""
        with self._guard:
            if self.running or self._stopping.is_set():
                return False
            self.logger.warning(
                "%s is %s (%s); it is rebuilt in the background, the database answers meanwhile",
                self.path.name,
                "damaged" if damaged else "unusable",
                reason,
            )
            self._thread = threading.Thread(
                target=self._run,
                args=(reason,),
                name=f"cpersona-heal-{self.path.name}",
                daemon=True,
            )
            self._thread.start()
        return True

    def wait(self, timeout: float | None = None) -> None:
        thread = self._thread
        if thread is not None:
            thread.join(timeout)

    def stop(self, timeout: float | None = None) -> None:
        """Stop a running rebuild at its next step and wait for it (the index closes)."""
        self._stopping.set()
        self.wait(timeout)

    def _run(self, reason: str) -> None:
        give_way = None if self.activity is None else GiveWay(self.activity, self._stopping)
        if give_way is not None:
            give_way.lower_priority()
        started = time.monotonic()
        try:
            fd = private_files.open_or_create(build_lock_path(self.path))
        except OSError as exc:
            self.logger.warning("cannot rebuild %s: %s", self.path.name, exc)
            return
        try:
            contended = self._acquire(fd)
            if contended is None:
                return
            if contended and not self.needed():
                self.logger.warning("%s was rebuilt by another process", self.path.name)
                return
            self._remove_orphans()
            rows = self.rebuild(self._stepper(fd, reason, give_way))
        except RebuildStopped:
            self.logger.info("the rebuild of %s stopped: the index closed", self.path.name)
        except (OSError, IndexObstructed, StoreCorrupt, ValueError) as exc:
            self.logger.warning("cannot rebuild %s: %s", self.path.name, exc)
        except Exception:  # a thread of its own: said, and the next use starts it again
            self.logger.exception("cannot rebuild %s", self.path.name)
        else:
            self.logger.warning(
                "%s rebuilt from the database (%d rows, %.1f s)",
                self.path.name,
                rows,
                time.monotonic() - started,
            )
        finally:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
            os.close(fd)  # releases the lock

    def _acquire(self, fd: int) -> bool | None:
        """The build lock, waited for while another process holds it: whether it had to wait
        (None: stopped first)."""
        contended = False
        while not self._stopping.is_set():
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return contended
            except BlockingIOError:
                contended = True
                self._stopping.wait(POLL_SECONDS)
        return None

    def _remove_orphans(self) -> None:
        """The private files of background rebuilds whose process died (a kill mid-rebuild):
        under the build lock no live process writes one but this."""
        for path in self.path.parent.glob(glob.escape(self.path.name) + ".heal*"):
            if orphaned(path.name[len(self.path.name) :]):
                path.unlink(missing_ok=True)

    def _stepper(self, fd: int, reason: str, give_way: GiveWay | None) -> Step:
        decile = [-1]

        def step(done: int, total: int) -> None:
            if self._stopping.is_set():
                raise RebuildStopped
            record = {"pid": os.getpid(), "done": done, "total": total, "reason": reason[:150]}
            # One fixed-size write in place: a reader never sees it half-empty.
            os.pwrite(fd, json.dumps(record).encode("utf-8")[:RECORD_LEN].ljust(RECORD_LEN), 0)
            tenth = 10 * done // total if total else 10
            if tenth != decile[0]:
                decile[0] = tenth
                self.logger.info("rebuilding %s: %d/%d rows", self.path.name, done, total)
            if give_way is not None:
                give_way.pause()

        return step


def orphaned(suffix: str) -> bool:
    """Whether a `.heal<pid>...` file (its name after the index file's) was left by a process
    that is gone: a background rebuild writes without the lock, so it is stale only then."""
    found = re.match(r"\.heal(\d+)", suffix)
    return found is not None and not _alive(int(found.group(1)))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True
