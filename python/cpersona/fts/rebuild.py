"""The rebuilds of a full-text index file from the database, for the derived-index base's
templates (derived/base.py: `rebuild`, `_rebuild_online`): `build` writes every row into a
private file as of one snapshot, `catch_up` appends to it the rows logged since. Both work on
plain values (the database, the table, the file, the core that takes the records): the lock
protocol and the install are the base's, the in-memory state fts/index.py's."""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from cpersona import private_files
from cpersona.derived.base import Progress
from cpersona.fts import checksums
from cpersona.fts.format import HEADER_LEN, Header, put_record, records_for
from cpersona.storage import Store
from cpersona.storage import fulltext as fts_sql
from cpersona.storage.change_log import Changes

#: Rows per batch of a rebuild (records written and fed to the core together).
BATCH = 8192


@dataclass(frozen=True, slots=True)
class Built:
    """A file written by `build`: its core, header and records' CRC."""

    core: Any
    header: Header
    crc: int


def build(
    db: Store,
    table: str,
    db_uid: bytes,
    core: Any,
    tmp: Path,
    progress: Progress | None = None,
    every: int = BATCH,
) -> Built:
    """Write every row of `table` into `tmp` (and its checksum), as of one snapshot of the
    table, feeding the records to `core` (an empty kernel index); `progress(done, total)` at
    the start, every `every` rows and at the end. A failure (or a progress that raises) leaves
    no `tmp` behind."""
    total = fts_sql.row_count(db, table)
    done, crc = 0, 0
    with db.snapshot():
        log_seq = fts_sql.max_seq(db)
        fd = private_files.recreate(tmp, os.O_RDWR)
        complete = False
        try:
            end = HEADER_LEN
            fresh = Header.new(table, db_uid)
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


def catch_up(db: Store, table: str, tmp: Path, built: Built, changes: Changes) -> Built:
    """Append the rows of `changes` (logged since `built` was written) to the file at `tmp`
    as change records, its core taking them too; the file as it is then. A background
    rebuild's catch-up, under the index's exclusive lock."""
    header, data = built.header, b""
    if changes.row_ids:
        data = records_for(changes.row_ids, fts_sql.rows_by_id(db, table, changes.row_ids))
        built.core.apply(data)
    header = replace(
        header,
        applied_seq=max(header.applied_seq, changes.max_seq),
        end=header.end + len(data),
        records=header.records + len(changes.row_ids),
        live=int(built.core.live),
    )
    crc = checksums.extend(built.crc, data)
    fd = os.open(tmp, os.O_RDWR)
    try:
        os.pwrite(fd, data, built.header.end)
        os.pwrite(fd, header.pack(), 0)
    finally:
        os.close(fd)
    checksums.write(tmp, header.generation, header.end, crc, fresh=True)
    return Built(built.core, header, crc)


def _write_batch(fd: int, core: Any, batch: list[bytes], end: int, crc: int) -> tuple[int, int]:
    if not batch:
        return end, crc
    data = b"".join(batch)
    os.pwrite(fd, data, end)
    core.apply(data)
    return end + len(data), checksums.extend(crc, data)
