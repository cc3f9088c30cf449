"""FtsIndex: one table's full-text index file: the full-text-record plug-in of the derived index
(derived/base.py owns the log-following protocol: locks, identity, history check, dirty flag,
trim, rebuild, install, background healing; the vector index is the other plug-in).

What is the full-text format's own is here: the header checks (docs/fts-index.md), how logged
rows are applied (appended as change records, the file's CRC extended), the compaction rule,
and the kernel's index each process searches (the Rust core's `FtsIndex`): the file's postings
segment mapped in place, shared by every process through the page cache (fts/segment.py), plus
the records appended after it, read under a shared lock (`_load_core`); the rebuilds from
scratch are in fts/rebuild.py, the templates that run them in derived/base.py. While a large
file is rebuilt in the background searches run the FTS5 statements; on PostgreSQL, which has
no FTS5 to answer with the same rows, a rebuild runs inside the call.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from types import ModuleType
from typing import Any

from cpersona.derived import healing
from cpersona.derived.base import DerivedIndex, Fields, Progress
from cpersona.derived.healing import RebuildProgress
from cpersona.derived.placement import SHARED_KEEP_LOG
from cpersona.derived.scope import scope_hash
from cpersona.errors import AheadOfSnapshot, StoreCorrupt
from cpersona.fts import checksums, rebuild, segment
from cpersona.fts.format import (
    HEADER_LEN,
    MAGIC,
    OFF_DIRTY,
    TABLE_CODES,
    VERSION,
    Header,
    read_header,
    records_for,
)
from cpersona.fts.rebuild import Built
from cpersona.storage import Store
from cpersona.storage import fulltext as fts_sql
from cpersona.storage.change_log import Changes
from cpersona.yielding import CallActivity

__all__ = ["SHARED_KEEP_LOG", "FtsIndex", "FtsStatus", "open_fts_indexes"]

log = logging.getLogger("cpersona.fts")

#: Applied log entries of a table kept before they are deleted.
TRIM_EVERY = 5000
#: Rebuild (compact) once the file holds this many more records than twice its live rows.
COMPACT_SLACK = 4096


class _Damaged(StoreCorrupt):
    """The file's records are not what their writers wrote (checksum, or they do not parse)."""


class _Deferred(StoreCorrupt):
    """The file is rebuilt in the background: the caller answers from the database."""


@dataclass(frozen=True, slots=True)
class FtsStatus:
    """What `cpersona index status` reports for one table's full-text index."""

    table: str
    path: str
    exists: bool
    usable: bool
    reason: str
    records: int
    live: int
    applied_seq: int
    log_seq: int
    #: The background rebuild running on this host, if any.
    rebuild: RebuildProgress | None = None


class FtsIndex(DerivedIndex[Header, Header, Built]):
    """The full-text index of one table (`memories` or `episodes`) of one database."""

    kind = "full-text"
    suffix = ".fts"
    table_codes = TABLE_CODES
    log_name = "fts_log"
    temp_prefix = "cpersona-fts-"

    def __init__(
        self,
        db: Store,
        table: str,
        core: Callable[[], Any],
        base: Path | None = None,
        keep_log: int = 0,
        *,
        background: bool = True,
        activity: CallActivity | None = None,
    ) -> None:
        """`core`: makes an empty in-memory index (the Rust core's `FtsIndex`). `base`,
        `keep_log`, `background`, `activity`: as `DerivedIndex` takes them (background False
        where the database has no FTS5 to answer while a large file is rebuilt)."""
        self._new_core = core
        #: The in-memory index, the file it was read from ((dev, ino, generation)) and how far.
        self._core: Any = None
        self._loaded: tuple[int, int, int] | None = None
        self._loaded_end = 0
        self._loaded_seq = -1
        #: The CRC of the records the core has read (up to `_loaded_end`; fts/checksums.py).
        self._loaded_crc = 0
        super().__init__(
            db,
            table,
            fts_sql,
            base,
            log,
            keep_log=keep_log,
            background=background,
            activity=activity,
        )

    @property
    def trim_every(self) -> int:
        return TRIM_EVERY  # read at each trim: the tests shrink it

    # -- the core a search reads -------------------------------------------------------------

    def current(self, *, heal: bool = True) -> Any:
        """The in-memory index, brought current with SQLite (the Rust core's `FtsIndex`).

        Raises StoreCorrupt while the file is being rebuilt, and when its records turn out
        damaged (then, with `heal`, the rebuild starts in the background): the caller answers
        from the database instead, and does not wait. None inside a read snapshot that the
        file has moved past while this process holds no core as new (the caller answers from
        the database as well)."""
        if self.healing:
            raise StoreCorrupt(f"{self.path.name} is being rebuilt")
        try:
            return self._current()
        except AheadOfSnapshot:
            return None
        except _Deferred as exc:
            raise StoreCorrupt(str(exc)) from None
        except _Damaged as exc:
            if heal:
                self._healer.start(str(exc))
            raise StoreCorrupt(str(exc)) from None

    def _current(self) -> Any:
        log_seq = fts_sql.max_seq(self.db)
        with self._thread_lock:
            if self._core is not None and self._loaded_seq == log_seq:
                return self._core
            if self._ahead_of_snapshot(self._loaded_seq or 0, log_seq):
                # This process's core moved past the caller's read snapshot (a write of
                # another thread was applied meanwhile): the caller hydrates its hits from the
                # snapshot, which drops rows written since. Rebuilding would be wrong: it is
                # ahead of the snapshot, not of the log.
                return self._core
            if self._applied_seq_unlocked() != log_seq:
                with self._flock(exclusive=True):
                    self._follow_locked()
            else:
                with self._flock(exclusive=False):
                    problem = self._catch_up_locked()
                if problem:  # a writer died since the check: repair under the write lock
                    with self._flock(exclusive=True):
                        self._follow_locked()
            return self._core

    def sync(self) -> bool:
        """Apply every logged write the file has not seen, and hold the index in memory;
        False while the file is rebuilt in the background (searches use FTS5 meanwhile)."""
        try:
            self.current()
        except StoreCorrupt:
            if self.healing:
                return False
            raise
        return True

    def after_write(self) -> None:
        """`sync`, when this process already holds the index (a process that never searched
        leaves loading to its first search or the warm-up)."""
        if self._core is not None and not self.healing:
            # Damage is said once by the healer; searches answer from the database.
            with contextlib.suppress(StoreCorrupt):
                self.current()

    def _catch_up_locked(self) -> str:
        """Under either lock: read what the file holds beyond what the core has applied.
        Returns why the file cannot be read ("" = the core is current with the file); raises
        `_Damaged` when its records are not what was written (rebuilt in the background)."""
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return "missing"
        try:
            st = os.fstat(fd)
            header, problem = self._parse(fd, st.st_size)
            if problem := self._judged(header, problem):
                return problem
            assert header is not None
            ident = (st.st_dev, st.st_ino, header.generation)
            try:
                loaded = self._load_core(fd, header, ident)
            except StoreCorrupt as exc:
                self._core = None
                raise _Damaged(str(exc)) from None
            if loaded is None:
                return "truncated"
            core, crc = loaded
            # A record whose text was overwritten in place still parses: the CRC says whether
            # these are the bytes their writers wrote. A core that took others is dropped.
            if (problem := checksums.problem(self.path, header.generation, header.end, crc)) != "":
                self._core = None
                if problem == checksums.DAMAGED:
                    raise _Damaged(problem)
                return problem
            core = self._open_core(header, core, crc)[0]  # a new segment if the delta grew
            self._core, self._loaded, self._loaded_end = core, ident, header.end
            self._loaded_seq, self._loaded_crc = header.applied_seq, crc
            return ""
        finally:
            os.close(fd)

    def _load_core(
        self, fd: int, header: Header, ident: tuple[int, int, int]
    ) -> tuple[Any, int] | None:
        """The kernel's index of the open file, and the CRC of the records it has read: this
        process's core extended by the records appended since it read the same file, else a
        new core reading all of them (None: the file ends before its header says). Raises
        StoreCorrupt for records that do not parse."""
        if self._core is None or self._loaded != ident or header.end < self._loaded_end:
            core, start, crc = self._open_core(header)
        else:
            core, start, crc = self._core, self._loaded_end, self._loaded_crc
        while start < header.end:
            # A record never straddles a read: read the rest at once in big pieces.
            data = os.pread(fd, header.end - start, start)
            if not data:
                return None
            crc = checksums.extend(crc, data)
            core.apply(data)
            start += len(data)
        return core, crc

    def _open_core(self, header: Header, core: Any = None, crc: int = 0) -> tuple[Any, int, int]:
        """Under either lock (fts/segment.py). Without `core`: a new core, mapped from the
        file's segment when it has one, and where its records start for it, and their CRC.
        With `core` (current with the file, whose records have the CRC `crc`): it, or one
        mapped from a new segment of it when it holds too many rows in the heap."""
        code = TABLE_CODES[self.table]
        if core is not None:
            new = segment.compact(
                core, self._new_core, self.path, code, header.generation, header.end, crc
            )
            return new, header.end, crc
        opened = segment.open_mapped(self._new_core, self.path, code, header.generation, header.end)
        return opened if opened is not None else (self._new_core(), HEADER_LEN, 0)

    # -- the header --------------------------------------------------------------------------

    def _parse(self, fd: int, size: int) -> tuple[Header | None, str]:
        header = read_header(fd)
        if header is None:
            return None, f"truncated ({size} bytes, shorter than the header)"
        if header.magic != MAGIC:
            return header, "not a cpersona full-text index (wrong magic)"
        if header.version != VERSION:
            return header, f"unsupported version {header.version}"
        if header.end < HEADER_LEN or size < header.end:
            return header, f"truncated ({size} bytes, records end at {header.end})"
        return header, ""

    def _fields(self, header: Header) -> Fields:
        return Fields(bool(header.dirty), header.db_uid, header.table, header.applied_seq)

    # -- applying the log --------------------------------------------------------------------

    def _open_for_update(self) -> tuple[Header | None, int, str]:
        header, problem = self._trusted()
        if not problem:
            problem = self._catch_up_locked()
        if problem or header is None:
            return None, 0, problem
        return header, header.applied_seq, ""

    def _apply(self, handle: Header, changes: Changes) -> str:
        """Append the changed rows as records (the core takes them first: its live count goes
        into the header; if the file cannot take them, the core is dropped and reloaded from
        the file next time)."""
        header = handle
        if changes.row_ids:
            rows = fts_sql.rows_by_id(self.db, self.table, changes.row_ids)
            data = records_for(changes.row_ids, rows)
            self._core.apply(data)
            live = int(self._core.live)
            records = header.records + len(changes.row_ids)
            if records > 2 * live + COMPACT_SLACK:
                self._core = None  # it took records the file has not: read again after
                return "more than half its records are superseded"
            try:
                fd = os.open(self.path, os.O_RDWR)
            except OSError:
                self._core = None
                raise
            try:
                os.pwrite(fd, (1).to_bytes(4, "little"), OFF_DIRTY)
                os.pwrite(fd, data, header.end)
                new = replace(
                    header,
                    applied_seq=changes.max_seq,
                    dirty=0,
                    end=header.end + len(data),
                    records=records,
                    live=live,
                )
                os.pwrite(fd, new.pack(), 0)
                crc = checksums.extend(self._loaded_crc, data)
                checksums.write(self.path, new.generation, new.end, crc)
            except OSError:
                self._core = None
                raise
            finally:
                os.close(fd)
            self._loaded_end, self._loaded_crc = new.end, crc
        else:
            fd = os.open(self.path, os.O_RDWR)
            try:
                new = replace(header, applied_seq=changes.max_seq, dirty=0)
                os.pwrite(fd, new.pack(), 0)
            finally:
                os.close(fd)
        self._loaded_seq = changes.max_seq
        return ""

    def _rebuild_or_defer(self, reason: str) -> bool:
        """The base's, raising `_Deferred` for a background rebuild (the caller runs the FTS5
        statement, and never waits for it)."""
        if not super()._rebuild_or_defer(reason):
            raise _Deferred(f"{self.path.name} is rebuilt in the background ({reason})")
        return True

    # -- building ----------------------------------------------------------------------------

    def _more_rows_than(self, limit: int) -> bool:
        return fts_sql.row_count(self.db, self.table) > limit

    def _build(self, tmp: Path, progress: Progress | None, *, online: bool) -> Built:
        every = healing.STEP_ROWS if online else rebuild.BATCH
        core = self._new_core()
        return rebuild.build(self.db, self.table, self.db_uid(), core, tmp, progress, every)

    def _built_seq(self, built: Built) -> int:
        return built.header.applied_seq

    def _catch_up(self, tmp: Path, built: Built, changes: Changes) -> Built:
        return rebuild.catch_up(self.db, self.table, tmp, built, changes)

    def _built_rows(self, built: Built) -> int:
        return built.header.records

    def _installed(self, built: Built) -> None:
        """The built file's core is this process's, mapped from the file's segment written now
        (so every other process maps it too instead of building the rows in its heap)."""
        st = os.stat(self.path)
        h = built.header
        core = segment.compact(
            built.core,
            self._new_core,
            self.path,
            TABLE_CODES[self.table],
            h.generation,
            h.end,
            built.crc,
        )
        self._core, self._loaded = core, (st.st_dev, st.st_ino, built.header.generation)
        self._loaded_end, self._loaded_crc = built.header.end, built.crc
        self._loaded_seq = built.header.applied_seq

    def _release(self) -> None:
        self._core = None

    # -- inspection --------------------------------------------------------------------------

    def status(self) -> FtsStatus:
        h, reason, log_seq, rebuild = self._status_parts()
        if h is None:
            exists = self.path.exists()
            return FtsStatus(
                self.table, str(self.path), exists, False, reason, 0, 0, 0, log_seq, rebuild
            )
        return FtsStatus(
            self.table,
            str(self.path),
            True,
            True,
            reason,
            h.records,
            h.live,
            h.applied_seq,
            log_seq,
            rebuild,
        )

    def verify(self) -> list[str]:
        """Compare every row of the index with SQLite; the differences found (empty = same).

        The index is first brought current; the comparison reads a fresh copy of the file
        (not this process's in-memory core), so it checks what every process would load.
        """
        from cpersona import _backend

        # The index's core is the Rust extension's (there is no other), and so is its fold.
        kernels = _backend.load("rust")
        with contextlib.suppress(StoreCorrupt):  # damaged records: named below
            self.current(heal=False)
        if self.healing:  # a rebuild it needed (or one running): compare what it installs
            self.wait_for_healing()
            with contextlib.suppress(StoreCorrupt):
                self.current(heal=False)
        with self._thread_lock, self._flock(exclusive=False):
            header, problem = self._inspect()
            if problem or header is None:
                return [f"{self.table}: full-text index unusable: {problem}"]
            core = self._new_core()
            with open(self.path, "rb") as f:
                f.seek(HEADER_LEN)
                data = f.read(header.end - HEADER_LEN)
            problems: list[str] = []
            crc = checksums.extend(0, data)
            if problem := checksums.problem(self.path, header.generation, header.end, crc):
                problems.append(f"{self.table}: {problem}")
            try:
                core.apply(data)
            except StoreCorrupt as exc:
                return [*problems, f"{self.table}: records do not parse: {exc}"]
            seq = header.applied_seq
            with self.db.snapshot():
                if fts_sql.max_seq(self.db) != seq:
                    problems.append(f"{self.table}: index applied seq {seq}, the log is further")
                indexed = set(core.ids().tolist())
                for row in fts_sql.iter_rows(self.db, self.table):
                    got = core.row(row.id)
                    if got is None:
                        problems.append(f"{self.table} {row.id}: in SQLite, missing from the index")
                        continue
                    indexed.discard(row.id)
                    want = (
                        scope_hash(row.agent_id),
                        scope_hash(row.project_id),
                        scope_hash(row.channel),
                        0 if row.source_id is None else scope_hash(row.source_id),
                        row.key,
                        row.time,
                        [kernels.fts_fold(c) for c in row.columns],
                    )
                    if tuple(got) != want:
                        problems.append(f"{self.table} {row.id}: differs from SQLite")
            for row_id in sorted(indexed):
                problems.append(f"{self.table} {row_id}: in the index, not in SQLite")
            if header.live != len(core.ids()):
                problems.append(
                    f"{self.table}: header counts {header.live} live rows, the records "
                    f"{len(core.ids())}"
                )
            return problems


def open_fts_indexes(
    db: Store,
    *,
    enabled: bool,
    kernels: ModuleType,
    base: Path | None = None,
    keep_log: int = 0,
    background: bool = True,
    activity: CallActivity | None = None,
) -> dict[str, FtsIndex]:
    """Both tables' full-text indexes, or none: on the numpy kernels (`_backend.load`), with
    FTS disabled, or with `CPERSONA_FTS_INDEX=false`, the FTS arms run the FTS5 statements.
    `background`, `activity`: as `FtsIndex` takes them."""
    core = getattr(kernels, "FtsIndex", None)
    if core is None or not enabled:
        return {}
    return {
        table: FtsIndex(
            db, table, core, base=base, keep_log=keep_log, background=background, activity=activity
        )
        for table in fts_sql.TABLES
    }
