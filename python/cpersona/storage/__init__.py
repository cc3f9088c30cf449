"""SQLite storage: the only package that speaks SQL."""

from __future__ import annotations

from cpersona.storage.db import Database
from cpersona.storage.schema import migrate

__all__ = ["Database", "open_database"]


def open_database(path: str, *, fts_enabled: bool = True, tracer=None) -> Database:  # type: ignore[no-untyped-def]
    """Open (creating if needed) and migrate the database at `path` (`:memory:` allowed)."""
    db = Database(path, tracer=tracer)
    try:
        migrate(db, fts_enabled=fts_enabled)
    except BaseException:
        db.close()
        raise
    return db
