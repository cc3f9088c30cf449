"""`cpersona index status|rebuild|verify`: the vector and full-text indexes from the command line.

Exit codes: 0 = usable / rebuilt / verified; 1 = verify found differences, status found an
unusable file, or the file could not be written (a full disk; a directory with contents where
the file belongs: the message says which); 2 = the database could not be opened.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

from cpersona.config import Settings
from cpersona.engine import full_text_indexes, host_vector_index, vector_indexes
from cpersona.errors import IndexObstructed
from cpersona.fts.index import FtsIndex
from cpersona.storage import database_label, open_database
from cpersona.storage.db import open_failure
from cpersona.vectors.index import VectorIndex

TABLES = ("memories", "episodes")


def _progress(table: str) -> Callable[[int, int], None]:
    def report(done: int, total: int) -> None:
        pct = 100.0 * done / total if total else 100.0
        print(f"\r  {table}: {done}/{total} rows ({pct:.0f}%)", end="", file=sys.stderr, flush=True)

    return report


def run_index_command(settings: Settings, action: str, table: str | None, kind: str = "all") -> int:
    url = settings.database_url
    label = database_label(settings.db_path, url)
    if not url and settings.db_path != ":memory:" and not Path(settings.db_path).exists():
        # Opening would create an empty database (and report on its empty index).
        print(f"cpersona: no database at {settings.db_path}", file=sys.stderr)
        return 2
    try:
        db = open_database(
            settings.db_path,
            fts_enabled=settings.fts_enabled,
            database_url=url,
            pool_size=settings.pg_pool_size,
            connect_timeout=settings.pg_connect_timeout_seconds,
            vector_index=host_vector_index(settings),
        )
    except Exception as exc:
        reason = str(exc) if url else open_failure(settings.db_path, exc)
        print(f"cpersona: cannot open the database {label}: {reason}", file=sys.stderr)
        return 2
    code = 0
    try:
        tables = (table,) if table else TABLES
        targets: list[VectorIndex | FtsIndex] = []
        if kind != "fulltext" and db.capabilities.vector_arm == "index_file":
            vectors = vector_indexes(db, settings)
            targets += [vectors[name] for name in tables]
        elif kind == "vector":
            print("no vector index files here: recall reads the vectors from the database")
        fts = full_text_indexes(db, settings) if kind != "vector" else {}
        targets += [fts[name] for name in tables if name in fts]
        for index in targets:
            try:
                code = _run(index, action) or code
            except OSError as exc:
                # A full disk, or a directory that is not ours where the file belongs: the old
                # file (if any) is untouched; say what is wrong, and go on to the next one.
                print(file=sys.stderr)
                print(f"{_name(index)}: {action} failed: {_reason(exc)}")
                code = 1
            finally:
                index.close()
    finally:
        db.close()
    return code


def _name(index: VectorIndex | FtsIndex) -> str:
    return index.table if isinstance(index, VectorIndex) else f"{index.table} full-text"


def _run(index: VectorIndex | FtsIndex, action: str) -> int:
    name = _name(index)
    if action == "status":
        if isinstance(index, VectorIndex):
            vst = index.status()
            usable, path, reason, rebuild = vst.usable, vst.path, vst.reason, vst.rebuild
            detail = f"dim {vst.dim}, {vst.live} rows ({vst.count - vst.live} deleted slots)"
            seqs = (vst.applied_seq, vst.log_seq)
        else:
            fst = index.status()
            usable, path, reason, rebuild = fst.usable, fst.path, fst.reason, fst.rebuild
            detail = f"{fst.live} rows ({fst.records} records)"
            seqs = (fst.applied_seq, fst.log_seq)
        # A rebuild under way on this host (any process) says how far it is.
        running = f"; {rebuild.describe()}" if rebuild is not None else ""
        if not usable:
            then = running or "; the server rebuilds it"
            print(f"{name}: {path}: not usable ({reason}){then}")
            return 1
        print(f"{name}: {path}: usable, {reason}; {detail}, log seq {seqs[0]}/{seqs[1]}{running}")
        return 0
    if action == "rebuild":
        print(f"rebuilding {name} index from the database", file=sys.stderr)
        rows = index.rebuild(progress=_progress(name))
        print(file=sys.stderr)
        print(f"{name}: rebuilt, {rows} rows")
        return 0
    problems = index.verify()
    for line in problems[:50]:
        print(line)
    if len(problems) > 50:
        print(f"... and {len(problems) - 50} more")
    print(f"{name}: {'OK' if not problems else f'{len(problems)} differences'}")
    return 1 if problems else 0


def _reason(exc: OSError) -> str:
    if isinstance(exc, IndexObstructed) or not exc.strerror:
        return str(exc)
    where = f" ({exc.filename})" if exc.filename else ""
    return f"{exc.strerror}{where}"
