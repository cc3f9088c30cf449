"""`cpersona index status|rebuild|verify`: the vector index from the command line.

Exit codes: 0 = usable / rebuilt / verified; 1 = verify found differences or status found an
unusable file; 2 = the database could not be opened.
"""

from __future__ import annotations

import sys
from pathlib import Path

from cpersona.config import Settings
from cpersona.storage import open_database
from cpersona.vectors.index import VectorIndex

TABLES = ("memories", "episodes")


def _progress(table: str):  # type: ignore[no-untyped-def]
    def report(done: int, total: int) -> None:
        pct = 100.0 * done / total if total else 100.0
        print(f"\r  {table}: {done}/{total} rows ({pct:.0f}%)", end="", file=sys.stderr, flush=True)

    return report


def run_index_command(settings: Settings, action: str, table: str | None) -> int:
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
        for name in (table,) if table else TABLES:
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
    finally:
        db.close()
    return code
