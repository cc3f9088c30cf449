"""`cpersona migrate --to URL|PATH [--from PATH|URL]`: copy a whole database to another backend.

SQLite (cpersona's, or CPersona 2.5.x's at schema 13) to PostgreSQL, PostgreSQL to an SQLite
file, or file to file. The source is only read (an SQLite file is opened read-only, in one
snapshot for the whole run). The target is created or migrated to the current schema by
`open_database`, then every copied table (storage/transfer.py) is read in key order in batches
and written with the same ids; each batch and the target's progress record for it commit in
one transaction, so a killed run resumes where it stopped when run again with the same
arguments. Embeddings are copied as they are stored (no re-embedding); a PostgreSQL target
cannot hold a blob that is not a whole number of finite float32s, which becomes NULL there and
is counted. Then every identity is raised to the source's high-water mark, row counts and a
sample of rows (the first, every Nth, the last) are compared field by field, and the progress
record is dropped. Derived index files are not copied: the target's first start builds them.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from cpersona import private_files
from cpersona.config import Settings
from cpersona.retrieval.sidecar import sidecar_path
from cpersona.storage import Store, transfer
from cpersona.storage.counts import DATA_TABLES
from cpersona.storage.error_kinds import StorageError, translate, translated
from cpersona.storage.schema import SCHEMA_VERSION
from cpersona.storage.transfer import Copied, Key, is_url
from cpersona.vectors.index import TABLE_CODES, index_file

#: Rows read and committed together by default.
BATCH = 1000
#: Rows compared field by field per table, at most (plus the last).
SAMPLE = 1000
#: Seconds between two progress lines of one table (the first and last are always shown).
PROGRESS_EVERY = 2.0


class MigrateError(Exception):
    """A migration refused for a reason the operator can act on (one line)."""


class VerificationFailed(MigrateError):
    """The target differs from the source after the copy (one line naming the difference)."""


def _redact(location: str) -> str:
    return transfer.label(location)


# -- opening both ends -----------------------------------------------------------------------


def open_source(location: str) -> Store:
    """The source, read-only, once it is found to be a database this cpersona can copy.

    Raises:
        MigrateError: it cannot be opened, or is not a cpersona or CPersona 2.5.x database.
    """
    if location == ":memory:":
        raise MigrateError("the source cannot be an in-memory database")
    if not is_url(location) and not os.path.isfile(location):
        raise MigrateError(f"no database file at {os.path.abspath(location)}")
    try:
        db = transfer.open_read_only(location)
    except transfer.OpenFailed as exc:
        raise MigrateError(str(exc)) from None
    try:
        _check_source(db, location)
    except BaseException:
        db.close()
        raise
    return db


def _check_source(db: Store, location: str) -> None:
    try:
        with translated():
            has_memories = bool(transfer.columns(db, "memories"))
            version = transfer.schema_version(db)
    except StorageError as exc:
        raise MigrateError(f"{_redact(location)} is not an SQLite database ({exc})") from None
    if not has_memories:
        raise MigrateError(f"{_redact(location)} is not a cpersona or CPersona 2.5.x database")
    if version < SCHEMA_VERSION:
        raise MigrateError(
            f"{_redact(location)} has schema version {version}, older than {SCHEMA_VERSION}: "
            "open it once with cpersona (or CPersona 2.5.x) to upgrade it, then migrate"
        )


def open_target(location: str, *, fts_enabled: bool = True) -> Store:
    """The target, created or brought to the current schema.

    Raises:
        MigrateError: it cannot be opened or used.
    """
    if location == ":memory:":
        raise MigrateError("the target cannot be an in-memory database")
    if not is_url(location) and os.path.isdir(location):
        raise MigrateError(f"{os.path.abspath(location)} is a directory, not a database file")
    try:
        return transfer.open_target(location, fts_enabled=fts_enabled)
    except transfer.OpenFailed as exc:
        raise MigrateError(str(exc)) from None


# -- progress --------------------------------------------------------------------------------


class ProgressLine:
    """`cpersona migrate: memories 12,000/100,000 rows (12%), 8,400 rows/s, ETA 9 s` on stderr:
    the first batch, then at most every PROGRESS_EVERY seconds, and the table's end."""

    def __init__(self, out: TextIO, table: str, total: int, done: int) -> None:
        self.out, self.table, self.total = out, table, total
        self.start_done = done
        self.start = time.monotonic()
        self.shown = 0.0

    def __call__(self, done: int, *, final: bool = False) -> None:
        now = time.monotonic()
        if not final and self.shown and now - self.shown < PROGRESS_EVERY:
            return
        self.shown = now
        elapsed = max(now - self.start, 1e-9)
        rate = (done - self.start_done) / elapsed
        pct = done * 100 // self.total if self.total else 100
        line = f"cpersona migrate: {self.table} {done:,}/{self.total:,} rows ({pct}%)"
        if rate > 0:
            line += f", {rate:,.0f} rows/s"
            if not final:
                line += f", ETA {max(self.total - done, 0) / rate:,.0f} s"
        print(line, file=self.out, flush=True)


# -- the migration ---------------------------------------------------------------------------


@dataclass(slots=True)
class TableResult:
    table: str
    rows: int  # in the target at the end
    copied: int  # by this run (less than `rows` when it resumed)
    nulled: int = 0


@dataclass(slots=True)
class Summary:
    tables: list[TableResult]
    sampled: int
    seconds: float
    resumed: bool

    @property
    def rows(self) -> int:
        return sum(t.rows for t in self.tables)

    @property
    def copied(self) -> int:
        return sum(t.copied for t in self.tables)

    @property
    def nulled(self) -> int:
        return sum(t.nulled for t in self.tables)


def _source_identity(source: Store, location: str) -> str:
    uid = transfer.database_uid(source)
    return _redact(location) + (f" uid={uid.hex()}" if uid else "")


def _layout(source: Store, target: Store) -> list[tuple[Copied, list[str]]]:
    """Each copied table the source has, with the non-key columns both ends have.

    Raises:
        MigrateError: the source has a column the target lacks (a newer schema).
    """
    out = []
    for table in transfer.TABLES:
        src_cols = transfer.columns(source, table.name)
        if not src_cols:
            continue
        dst_cols = transfer.columns(target, table.name)
        extra = [c for c in src_cols if c not in dst_cols]
        if extra:
            raise MigrateError(
                f"the source's {table.name} has columns the target lacks "
                f"({', '.join(extra)}): it was written by a newer version"
            )
        out.append((table, [c for c in dst_cols if c in src_cols and c not in table.key]))
    return out


def _data_rows(db: Store) -> int:
    return sum(transfer.count(db, t) for t in transfer.TABLES if t.name in DATA_TABLES)


def migrate(
    source: Store,
    target: Store,
    *,
    source_location: str,
    force: bool = False,
    batch: int = BATCH,
    sample: int = SAMPLE,
    out: TextIO | None = None,
    after_batch: Callable[[str, int], None] | None = None,
) -> Summary:
    """Copy `source` into `target` (resuming an interrupted copy from the same source), verify
    it, and return what was done.

    Raises:
        MigrateError: refused (a target with data, another migration in it) or a mismatch
            found by the verification (the progress record is then kept).
    """
    out = out if out is not None else sys.stderr
    started = time.monotonic()
    identity = _source_identity(source, source_location)
    with transfer.snapshot(source):
        layout = _layout(source, target)
        resumed = _prepare(source, target, identity, layout, force, out)
        results = []
        for table, cols in layout:
            results.append(_copy_table(source, target, table, cols, batch, out, after_batch))
        for table, _ in layout:
            if table.identity:
                transfer.raise_identity(target, table, transfer.identity_mark(source, table))
        sampled = _verify(source, target, layout, sample, results)
    transfer.finish_progress(target)
    return Summary(results, sampled, time.monotonic() - started, resumed)


def _prepare(
    source: Store,
    target: Store,
    identity: str,
    layout: list[tuple[Copied, list[str]]],
    force: bool,
    out: TextIO,
) -> bool:
    """Check the target and write a fresh progress record; True when resuming instead."""
    record = transfer.read_progress(target)
    if record is not None and not force:
        if record.get("source") != identity:
            raise MigrateError(
                f"the target holds an unfinished migration from {record.get('source')}; "
                "rerun with that --from to resume it, or pass --force to start over"
            )
        for table, _ in layout:
            after = transfer.decode_key(record.get(f"table:{table.name}", "null"))
            expected = transfer.count(source, table, after) if after is not None else 0
            have = transfer.count(target, table)
            if have != expected:
                raise MigrateError(
                    f"the source changed since the interrupted migration ({table.name}: "
                    f"{expected} rows up to the last copied key, {have} copied); "
                    "pass --force to start over"
                )
        print(f"cpersona migrate: resuming the migration from {identity}", file=out)
        return True
    if record is None and not force:
        rows = _data_rows(target)
        if rows:
            raise MigrateError(f"the target holds {rows} rows; pass --force to replace them")
    fresh = {"source": identity}
    fresh.update({f"table:{t.name}": transfer.encode_key(None) for t in transfer.TABLES})
    # The target's own records of its (absent) vectors and conversions go with its rows.
    present = [t.name for t in transfer.TABLES if transfer.columns(target, t.name)]
    transfer.start_progress(target, fresh, present)
    return False


def _copy_table(
    source: Store,
    target: Store,
    table: Copied,
    cols: list[str],
    batch: int,
    out: TextIO,
    after_batch: Callable[[str, int], None] | None,
) -> TableResult:
    record = transfer.read_progress(target) or {}
    after: Key | None = transfer.decode_key(record.get(f"table:{table.name}", "null"))
    total = transfer.count(source, table)
    done = start = transfer.count(target, table)
    progress = ProgressLine(out, table.name, total, done)
    nulled = 0
    n_key = len(table.key)
    while True:
        rows = transfer.read_batch(source, table, cols, after, batch)
        if not rows:
            break
        after = rows[-1][:n_key]
        nulled += transfer.write_batch(target, table, cols, rows, transfer.encode_key(after))
        done += len(rows)
        if after_batch is not None:
            after_batch(table.name, done)
        if done < total:
            progress(done)
    if total:
        progress(done, final=True)
    # Vectors nulled by an earlier, interrupted run are counted by the verification.
    return TableResult(table.name, done, done - start, nulled)


def _verify(
    source: Store,
    target: Store,
    layout: list[tuple[Copied, list[str]]],
    sample: int,
    results: list[TableResult],
) -> int:
    """Compare row counts and sampled rows; return how many rows were compared.

    Raises:
        MigrateError: naming the first difference.
    """
    sampled = 0
    by_name = {r.table: r for r in results}
    for table, cols in layout:
        want, have = transfer.count(source, table), transfer.count(target, table)
        if want != have:
            raise VerificationFailed(
                f"verification failed: {table.name} has {want} rows in the source, {have} "
                "in the target"
            )
        stride = max(1, -(-want // sample)) if sample > 0 else want + 1
        keys = transfer.sample_keys(source, table, stride)
        src = transfer.rows_by_keys(source, table, cols, keys)
        dst = transfer.rows_by_keys(target, table, cols, keys)
        for key in keys:
            _compare(table, cols, key, src[key], dst.get(key), target)
        sampled += len(keys)
        if table.vector is not None:
            # Every row whose vector the target could not hold, this run or an earlier one.
            by_name[table.name].nulled = transfer.null_vector_rows(target, table) - (
                transfer.null_vector_rows(source, table)
            )
    return sampled


def _norm(value: object) -> object:
    return bytes(value) if isinstance(value, memoryview | bytearray) else value


def _compare(
    table: Copied, cols: list[str], key: Key, want: tuple, have: tuple | None, target: Store
) -> None:
    where = f"{table.name} {'/'.join(table.key)}={'/'.join(str(k) for k in key)}"
    if have is None:
        raise VerificationFailed(f"verification failed: {where} is missing in the target")
    for col, a, b in zip(cols, want, have, strict=True):
        a, b = _norm(a), _norm(b)
        if col == table.vector and isinstance(a, bytes) and target.vector_param(a) is None:
            a = None  # a blob the target cannot hold as a vector: stored as NULL
        if a != b:
            raise VerificationFailed(
                f"verification failed: {where} differs in {col} "
                f"(source {_show(a)}, target {_show(b)})"
            )


def _show(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


# -- the command -----------------------------------------------------------------------------


def _copy_sidecar(source: str, target: str) -> bool:
    """The calibration measured on the source's rows, beside a target file without one."""
    src, dst = sidecar_path(source), sidecar_path(target)
    if src is None or dst is None or not os.path.isfile(src) or os.path.exists(dst):
        return False
    private_files.copy(src, dst)
    return True


def run_migrate(
    settings: Settings,
    to: str,
    source: str | None = None,
    *,
    force: bool = False,
    batch: int = BATCH,
    sample: int = SAMPLE,
) -> int:
    """`cpersona migrate`: exit 0 copied and verified, 1 failed, 2 refused."""
    source = source or settings.database_url or settings.db_path
    if batch < 1:
        return _fail(2, "--batch must be at least 1")
    if _redact(source) == _redact(to):
        return _fail(2, f"the source and the target are the same database ({_redact(to)})")
    try:
        src = open_source(source)
    except MigrateError as exc:
        return _fail(2, str(exc))
    try:
        try:
            dst = open_target(to, fts_enabled=settings.fts_enabled)
        except MigrateError as exc:
            return _fail(2, str(exc))
        try:
            if not is_url(to) and force:
                for table in TABLE_CODES:  # they would describe the replaced rows
                    for path in (index_file(to, table), Path(f"{to}.{table}.fts")):
                        path.unlink(missing_ok=True)
                        Path(f"{path}.sum").unlink(missing_ok=True)  # its checksums
            done = migrate(
                src, dst, source_location=source, force=force, batch=batch, sample=sample
            )
        except VerificationFailed as exc:
            return _fail(1, str(exc))
        except MigrateError as exc:
            return _fail(2, str(exc))
        except transfer.RowRefused as exc:
            return _fail(
                1,
                f"failed: {exc} (the batches before its batch are kept: change or delete "
                "that row in the source, then rerun the same command to resume)",
            )
        except Exception as exc:
            # A driver error (either backend's, as its storage kind) or the file system's;
            # anything else is a bug and keeps its traceback.
            if not isinstance(exc, OSError) and translate(exc) is None:
                raise
            return _fail(
                1, f"failed: {type(exc).__name__}: {exc} (rerun the same command to resume)"
            )
        except KeyboardInterrupt:
            return _fail(130, "interrupted (rerun the same command to resume)")
        finally:
            dst.close()
    finally:
        src.close()
    if not is_url(source) and not is_url(to) and _copy_sidecar(source, to):
        _err(f"cpersona migrate: copied the calibration sidecar to {sidecar_path(to)}")
    _summary(done, source, to)
    return 0


def _summary(done: Summary, source: str, to: str) -> None:
    parts = ", ".join(f"{t.rows:,} {t.table}" for t in done.tables if t.rows)
    if done.resumed:
        parts += f"; {done.copied:,} of them by this run"
    rate = done.copied / done.seconds if done.seconds > 0 else 0.0
    _err(
        f"cpersona migrate: copied {done.rows:,} rows ({parts or 'none'}) from {_redact(source)} "
        f"to {_redact(to)} in {done.seconds:.1f} s ({rate:,.0f} rows/s); verified row counts "
        f"and {done.sampled:,} sampled rows"
    )
    if done.nulled:
        _err(
            f"cpersona migrate: {done.nulled} stored embeddings are not whole float32 vectors "
            "and are empty (NULL) in the target: those rows recall by text only"
        )


def _err(text: str) -> None:
    print(text, file=sys.stderr)


def _fail(code: int, text: str) -> int:
    _err(f"cpersona migrate: {'refused: ' if code == 2 else ''}{text}")
    return code


__all__ = ["MigrateError", "Summary", "migrate", "open_source", "open_target", "run_migrate"]
