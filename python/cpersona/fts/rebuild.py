"""The rebuilds of a full-text index file from SQLite: `build` (every row into a private file,
as of one snapshot) and `rebuild_online` (the background rebuild of vectors/healing.py's
`Healer`: built without the index lock, caught up and renamed in under it). The lock protocol
and the install are the derived-index base's (derived/base.py)."""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cpersona import private_files
from cpersona.fts import checksums
from cpersona.fts.format import HEADER_LEN, Header, put_record, records_for
from cpersona.storage import embeddings as vector_sql
from cpersona.storage import fulltext as fts_sql
from cpersona.vectors import healing
from cpersona.vectors.healing import Step

if TYPE_CHECKING:
    from cpersona.fts.index import FtsIndex

#: Rows per batch of a rebuild (records written and fed to the core together).
BATCH = 8192


@dataclass(frozen=True, slots=True)
class Built:
    """A file written by `build`: its core, header and records' CRC."""

    core: Any
    header: Header
    crc: int


def build(index: FtsIndex, tmp: Path, progress: Step | None = None, every: int = BATCH) -> Built:
    """Write every row into `tmp` (and its checksum), as of one snapshot of the table;
    `progress(done, total)` every `every` rows. A failure (or a progress that raises) leaves
    no `tmp` behind."""
    db, table = index.db, index.table
    total = fts_sql.row_count(db, table)
    core = index._new_core()
    done, crc = 0, 0
    with vector_sql.snapshot(db):
        log_seq = fts_sql.max_seq(db)
        fd = private_files.recreate(tmp, os.O_RDWR)
        complete = False
        try:
            end = HEADER_LEN
            fresh = Header.new(table, index.db_uid())
            os.pwrite(fd, fresh.pack(), 0)
            batch: list[bytes] = []
            if progress is not None:
                progress(0, total)
            for row in fts_sql.iter_rows(db, table):
                batch.append(put_record(row))
                done += 1
                if len(batch) == BATCH:
                    end, crc = _write_batch(fd, core, batch, end, crc)
                    batch = []
                if progress is not None and done % every == 0:
                    progress(done, total)
            end, crc = _write_batch(fd, core, batch, end, crc)
            header = replace(fresh, applied_seq=log_seq, dirty=0, end=end, records=done, live=done)
            os.pwrite(fd, header.pack(), 0)
            checksums.write(tmp, header.generation, end, crc, fresh=True)
            if progress is not None:
                progress(done, total)
            complete = True
        finally:
            os.close(fd)
            if not complete:  # a full disk mid-write: the temporary must not hold space
                checksums.remove_with_sum(tmp)
    return Built(core, header, crc)


def rebuild_online(index: FtsIndex, step: Step | None = None) -> int:
    """The background rebuild: the rows are written into `<file>.heal<pid>` without the lock
    (this process's searches use FTS5 meanwhile, other processes keep their cores); then,
    under the exclusive lock, the rows logged since are appended and the file is renamed in.
    A failure or a stop (`step` raises) removes the private file: the index file stays what
    it was (or absent), never half-written."""
    tmp = index.path.with_name(f"{index.path.name}.heal{os.getpid()}")
    try:
        built = build(index, tmp, step, every=healing.STEP_ROWS)
        # The index's own lock protocol (derived/base.py): these are its internals by design.
        with index._thread_lock, index._flock(exclusive=True):
            seq = built.header.applied_seq
            changes = fts_sql.changes_since(index.db, index.table, seq)
            if index._history_problem(seq) or changes.lost:
                checksums.remove_with_sum(tmp)
                return index._rebuild_locked()
            header, crc = built.header, built.crc
            data = b""
            if changes.row_ids:
                rows = fts_sql.rows_by_id(index.db, index.table, changes.row_ids)
                data = records_for(changes.row_ids, rows)
                built.core.apply(data)
            header = replace(
                header,
                applied_seq=max(seq, changes.max_seq),
                end=header.end + len(data),
                records=header.records + len(changes.row_ids),
                live=int(built.core.live),
            )
            crc = checksums.extend(crc, data)
            fd = os.open(tmp, os.O_RDWR)
            try:
                os.pwrite(fd, data, built.header.end)
                os.pwrite(fd, header.pack(), 0)
            finally:
                os.close(fd)
            checksums.write(tmp, header.generation, header.end, crc, fresh=True)
            index._install(tmp, Built(built.core, header, crc))
            return header.live
    except BaseException:
        checksums.remove_with_sum(tmp)
        raise


def _write_batch(fd: int, core: Any, batch: list[bytes], end: int, crc: int) -> tuple[int, int]:
    if not batch:
        return end, crc
    data = b"".join(batch)
    os.pwrite(fd, data, end)
    core.apply(data)
    return end + len(data), checksums.extend(crc, data)
