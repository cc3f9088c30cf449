"""The postings segment of a full-text index: the rows, trigram postings and folded texts in
the layout the Rust core searches in place (docs/fts-index.md, "Segment").

The records file stays the truth the sync protocol appends to. `<file>.seg` is derived from it:
an immutable file naming the records it holds (the records file's `generation`, the offset
`end` they stop at, and their CRC-32), built by the core from its index, written to
`<file>.seg.tmp<pid>` and renamed into place, so a reader finds the old segment, the new one or
none, never part of one. A process that needs a new core maps the segment (its pages are the
page cache's, shared by every process on the host) and applies only the records after `end`
(the delta, in its heap); when the delta outgrows `delta_limit`, the process writes a new
segment of everything it holds and maps that instead. The layout is `rust/fts/segment.rs`'s,
declared for Python in fts/format.py (`SEGMENT_*`; tests/kernels/test_kernels_layout.py holds
the two equal through `_core.layout()`); only the Rust core reads segments (on the numpy
kernels the FTS arms run the FTS5 statements, as before).

`CPERSONA_FTS_SEGMENT=false` keeps every index in the heap, as before.
"""

from __future__ import annotations

import glob
import logging
import mmap
import os
import zlib
from pathlib import Path
from typing import Any

from cpersona import private_files
from cpersona.errors import StoreCorrupt
from cpersona.fts.format import SEGMENT_HEADER

log = logging.getLogger("cpersona.fts")

SUFFIX = ".seg"
#: Below this many live rows an index stays in the heap: its postings cost little there.
MIN_ROWS = 1000
#: Rows the delta may hold before it is compacted into a new segment (or 1/16 of the rows).
DELTA_MIN = 4096


def enabled() -> bool:
    raw = os.environ.get("CPERSONA_FTS_SEGMENT", "true").strip().lower()
    return raw not in {"0", "false", "no", "off"}


def delta_limit(rows: int) -> int:
    return max(DELTA_MIN, rows // 16)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def path_of(index_path: Path) -> Path:
    return index_path.with_name(index_path.name + SUFFIX)


def _crc_at() -> int:
    """Where `body_crc` is (the declaration of fts/format.py, held equal to the core's)."""
    return next(offset for name, offset, _ in SEGMENT_HEADER if name == "body_crc")


def _file_crc(path: Path) -> int:
    crc_at = _crc_at()
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as raw:
        view = memoryview(raw)
        try:
            crc = zlib.crc32(view[:crc_at])
            crc = zlib.crc32(b"\0\0\0\0", crc)
            return zlib.crc32(view[crc_at + 4 :], crc)
        finally:
            view.release()


def open_mapped(
    new_core: Any, index_path: Path, table: int, generation: int, end: int
) -> tuple[Any, int, int] | None:
    """A core over this records file's segment: (core, the offset its records end at, their
    CRC-32), or None when there is no usable one (then the caller reads every record)."""
    mapped = getattr(new_core, "mapped", None)
    if mapped is None or not enabled():
        return None
    path = path_of(index_path)
    try:
        core = mapped(str(path))
    except FileNotFoundError:
        return None
    except (OSError, StoreCorrupt) as exc:
        log.warning("ignoring %s: %s (it is written again)", path.name, exc)
        path.unlink(missing_ok=True)
        return None
    seg_table, seg_generation, seg_end, records_crc, body_crc = core.segment
    if seg_table != table or seg_generation != generation or seg_end > end:
        return None  # of an earlier records file: replaced at the next compaction
    # The segment is read in place, so damage to it would be searched: its CRC is checked at
    # each open (page cache reads, no heap copy; docs/performance.md gives the cost).
    try:
        if _file_crc(path) != body_crc:
            log.warning("ignoring %s: its checksum does not match (it is written again)", path.name)
            path.unlink(missing_ok=True)
            return None
    except OSError:
        return None
    return core, seg_end, records_crc


def compact(
    core: Any, new_core: Any, index_path: Path, table: int, generation: int, end: int, crc: int
) -> Any:
    """`core` (current with the records up to `end`, whose CRC-32 is `crc`), or a core mapped
    from a new segment of the same rows when `core` holds too much in the heap: no segment yet
    at `MIN_ROWS` rows or more, or a delta beyond `delta_limit`."""
    if not enabled() or not hasattr(core, "write_segment"):
        return core
    live = int(core.live)
    if live < MIN_ROWS:
        return core
    if core.segment is not None and int(core.delta_slots) <= delta_limit(live):
        return core
    try:
        build(core, index_path, table, generation, end, crc)
    except OSError as exc:  # a full disk: the heap core answers the same
        log.warning("could not write %s: %s", path_of(index_path).name, exc)
        return core
    opened = open_mapped(new_core, index_path, table, generation, end)
    if opened is None or opened[1] != end:
        return core
    return opened[0]


def build(core: Any, index_path: Path, table: int, generation: int, end: int, crc: int) -> None:
    """Write `core`'s rows as the segment of the records up to `end`: to a temporary, then
    renamed into place (a crash leaves the old segment or none, and the temporary, removed by
    the next build)."""
    final = path_of(index_path)
    remove_stale(index_path)
    tmp = final.with_name(f"{final.name}.tmp{os.getpid()}")
    try:
        # The extension's writer creates with the umask's mode (0644 under the usual 022) and
        # keeps that of a file already there: the segment holds every memory's text.
        private_files.reserve(tmp, replace=True)
        core.write_segment(str(tmp), table, generation, end, crc)
        crc_at = _crc_at()
        body_crc = _file_crc(tmp)
        fd = os.open(tmp, os.O_RDWR)
        try:
            os.pwrite(fd, body_crc.to_bytes(4, "little"), crc_at)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, final)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def remove_stale(index_path: Path) -> None:
    """Remove the temporaries of segment builds whose processes are gone."""
    final = path_of(index_path)
    for path in final.parent.glob(glob.escape(final.name) + ".tmp*"):
        pid = path.name[len(final.name) + len(".tmp") :]
        if pid.isdigit() and not _alive(int(pid)):
            path.unlink(missing_ok=True)
