"""Healing a vector index file whose content is damaged: the check of a new mapping, and the
rebuild that runs in the background while recall reads SQLite (issue 21).

The scan refuses a slot whose bytes no longer match their checksum (checksums.py); the caller
then hands the index to `Healer.start` and answers from SQLite (the full-text index uses the
same `Healer` for its own rebuild, fts/index.py). The rebuild (`rebuild_online`)
reads the rows into a private file without the index lock, so neither this process's calls
nor another process's scans wait for it; only the catch-up with what was logged meanwhile and
the rename run under the exclusive lock.
"""

from __future__ import annotations

import logging
import os
import re
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from cpersona.errors import IndexObstructed, StoreCorrupt
from cpersona.storage import vectors as vector_sql
from cpersona.vectors import checksums
from cpersona.vectors.format import SECTIONS, Layout, VectorFileWriter
from cpersona.vectors.slots import HEADROOM, TABLE_CODES, append_row, release

if TYPE_CHECKING:
    from cpersona.vectors.index import VectorIndex

log = logging.getLogger("cpersona.vectors")


class Healer:
    """The background rebuild of one derived file, at most one at a time in a process (used by
    the vector index and the full-text index alike)."""

    def __init__(self, path: Path, rebuild: Callable[[], int], logger: logging.Logger) -> None:
        self.path = path
        self._rebuild = rebuild
        self._log = logger
        self._thread: threading.Thread | None = None
        self._guard = threading.Lock()

    @property
    def running(self) -> bool:
        thread = self._thread
        return thread is not None and thread.is_alive()

    def start(self, reason: str) -> bool:
        """Start the rebuild, saying once why; False when one is already running."""
        with self._guard:
            if self.running:
                return False
            self._log.warning(
                "%s is damaged (%s); it is rebuilt in the background, the database answers "
                "meanwhile",
                self.path.name,
                reason,
            )
            self._thread = threading.Thread(
                target=self._run, name=f"cpersona-heal-{self.path.name}", daemon=True
            )
            self._thread.start()
        return True

    def wait(self, timeout: float | None = None) -> None:
        thread = self._thread
        if thread is not None:
            thread.join(timeout)

    def _run(self) -> None:
        try:
            rows = self._rebuild()
        except (OSError, IndexObstructed, StoreCorrupt, ValueError) as exc:
            self._log.warning("cannot rebuild %s: %s", self.path.name, exc)
        else:
            self._log.warning("%s rebuilt from the database (%d rows)", self.path.name, rows)


def rebuild_online(index: VectorIndex) -> int:
    """A rebuild that holds the exclusive lock only to catch up and swap: the rows are
    written into `<file>.heal<pid>` without it, from the log position read first; then,
    under the lock, what was logged meanwhile is applied to that file and it is renamed
    in. Returns the rows written."""

    db, table = index.db, index.table
    log_seq = vector_sql.max_seq(db)
    total, dim = vector_sql.embedded_shape(db, table)
    tmp = index.path.with_name(f"{index.path.name}.heal{os.getpid()}")
    done = 0
    try:
        writer = VectorFileWriter.create(
            tmp, dim or 1, total + HEADROOM, index.db_uid(), TABLE_CODES[table]
        )
        try:
            for row in vector_sql.iter_rows(db, table):
                append_row(writer, row, HEADROOM)
                done += 1
            writer.set_header(applied_seq=log_seq, dirty=0)
            checksums.write(writer)
        finally:
            release(writer)
        os.chmod(tmp, 0o600)
        # The index's own lock protocol (index.py): these are its internals by design.
        with index._thread_lock, index._flock(exclusive=True):
            if index._history_problem(log_seq):  # entries it needs were trimmed meanwhile
                remove_with_sums(tmp)
                return index._rebuild_locked()
            writer = VectorFileWriter(tmp)
            try:
                caught_up = index._apply_locked(writer)
            finally:
                release(writer)
            if caught_up:
                index._install(tmp)
            else:  # the catch-up rebuilt the index file itself (a compaction)
                remove_with_sums(tmp)
    except BaseException:
        remove_with_sums(tmp)
        raise
    return done


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


def remove_with_sums(path: Path) -> None:
    path.unlink(missing_ok=True)
    checksums.sums_path(path).unlink(missing_ok=True)


def content_problem(path: Path, dim: int, capacity: int, count: int, sums: np.ndarray) -> str:
    """Why the slots of the file at `path` do not match their checksums, or its scan order is
    no permutation ("" when both hold): the check of a new mapping, in numpy over a read-only
    mapping of the file, `count` slots."""
    if count == 0:
        return ""
    layout = Layout.of(dim, capacity)
    mm = np.memmap(path, dtype=np.uint8, mode="r", shape=(layout.file_len,))
    views: dict[str, Any] = {}
    for name, dtype in SECTIONS:
        shape = (capacity, dim) if name == "vectors" else (capacity,)
        views[name] = np.ndarray(shape, dtype=dtype, buffer=mm, offset=layout.offsets[name])
    problem = checksums.order_problem(views["order"], count)
    if problem:
        return problem
    wrong = np.flatnonzero(checksums.slot_sums(views, slice(0, count)) != sums[:count])
    if wrong.shape[0]:
        first = int(views["ids"][int(wrong[0])])
        return f"the content checksums of {wrong.shape[0]} slots differ (row {first} first)"
    return ""
