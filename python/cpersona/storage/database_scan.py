"""The vector arm's scan run inside the database: the arm of a store whose capabilities say so
(`Capabilities.vector_arm == "database"`), and on a store that can (`available`: PostgreSQL)
the fallback of its index file while that is rebuilt or unusable, and the test oracle of the
index path. Callers above storage/ ask this module, never a backend's (tests/test_seam.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from cpersona.storage.interface import Store
from cpersona.storage.scan_request import ScanLimits, Scope

if TYPE_CHECKING:
    from cpersona.storage.pg.db import PgDatabase
    from cpersona.storage.pg.vectors import WindowHits

__all__ = ["available", "window_scan"]


def available(db: Store) -> bool:
    """Whether `db` can scan vectors in the database (pgvector on PostgreSQL); where it
    cannot (SQLite), the index file's fallback is the chunked BLOB scan."""
    return db.dialect == "postgresql"


def window_scan(
    db: Store, table: str, query: bytes, scope: Scope, limits: ScanLimits
) -> WindowHits:
    """The near list and the far list of `table` scored in the database by one statement
    (retrieval.md §4.2-4.3; `query` as little-endian float32 bytes); with `scope.span`,
    positions go only to rows whose instant it admits.

    Raises:
        ValueError: the store cannot scan vectors in the database (`available`).
    """
    if not available(db):
        raise ValueError(f"the {db.dialect} store does not scan vectors in the database")
    from cpersona.storage.pg import vectors as pg_vectors

    pg_db = cast("PgDatabase", db)
    if scope.span is None:
        return pg_vectors.window_scan(pg_db, table, query, scope, limits)
    return pg_vectors.span_scan(pg_db, table, query, scope, limits)
