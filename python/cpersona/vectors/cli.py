"""`cpersona index status|rebuild|verify`: the vector and full-text indexes from the command line.

Exit codes: 0 = usable / rebuilt / verified; 1 = verify found differences or status found an
unusable file; 2 = the database could not be opened.
"""

from __future__ import annotations

import sys
from pathlib import Path

from cpersona.config import Settings
from cpersona.fts.index import FtsIndex, open_fts_indexes
from cpersona.storage import open_database
from cpersona.vectors.index import VectorIndex

TABLES = ("memories", "episodes")


def _progress(table: str):  # type: ignore[no-untyped-def]
    def report(done: int, total: int) -> None:
        pct = 100.0 * done / total if total else 100.0
        print(f"\r  {table}: {done}/{total} rows ({pct:.0f}%)", end="", file=sys.stderr, flush=True)

    return report


def run_index_command(settings: Settings, action: str, table: str | None, kind: str = "all") -> int:
    if settings.db_path != ":memory:" and not Path(settings.db_path).exists():
        # Opening would create an empty database (and report on its empty index).
        print(f"cpersona: no database at {settings.db_path}", file=sys.stderr)
        return 2
    try:
        db = open_database(settings.db_path, fts_enabled=settings.fts_enabled)
    except Exception as exc:
        print(f"cpersona: cannot open the database {settings.db_path}: {exc}", file=sys.stderr)
        return 2
    code = 0
    try:
        tables = (table,) if table else TABLES
        for name in () if kind == "fulltext" else tables:
            index = VectorIndex(db, name)
            if action == "status":
                st = index.status()
                print(
                    f"{name}: {st.path}: "
                    + (
                        f"usable, {st.reason}; dim {st.dim}, {st.live} rows "
                        f"({st.count - st.live} deleted slots), "
                        f"log seq {st.applied_seq}/{st.log_seq}"
                        if st.usable
                        else f"not usable ({st.reason}); the server rebuilds it"
                    )
                )
                code = code or (0 if st.usable else 1)
            elif action == "rebuild":
                print(f"rebuilding {name} index from SQLite", file=sys.stderr)
                rows = index.rebuild(progress=_progress(name))
                print(file=sys.stderr)
                print(f"{name}: rebuilt, {rows} rows")
            else:
                problems = index.verify()
                for line in problems[:50]:
                    print(line)
                if len(problems) > 50:
                    print(f"... and {len(problems) - 50} more")
                print(f"{name}: {'OK' if not problems else f'{len(problems)} differences'}")
                code = code or (1 if problems else 0)
            index.close()
        enabled = kind != "vector" and settings.fts_enabled and settings.fts_index
        fts = open_fts_indexes(db, enabled=enabled)
        for name in tables:
            if name in fts:
                code = _fts_action(fts[name], action) or code
                fts[name].close()
    finally:
        db.close()
    return code


def _fts_action(index: FtsIndex, action: str) -> int:
    name = f"{index.table} full-text"
    if action == "status":
        st = index.status()
        if st.usable:
            print(
                f"{name}: {st.path}: usable, {st.reason}; {st.live} rows "
                f"({st.records} records), log seq {st.applied_seq}/{st.log_seq}"
            )
            return 0
        print(f"{name}: {st.path}: not usable ({st.reason}); the server rebuilds it")
        return 1
    if action == "rebuild":
        print(f"rebuilding {name} index from SQLite", file=sys.stderr)
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
