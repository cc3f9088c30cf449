"""Reads by id, deletes by id and the newest-first listing of a listed table (`memories`,
`episodes`), written once: the tables differ only in their name, the SELECT list of their
listing shape, how a row becomes that shape, and which rows a delete may not remove."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Generic, TypeVar

from cpersona.storage.db import is_row_id
from cpersona.storage.error_kinds import translated
from cpersona.storage.filters import project_where
from cpersona.timerange import first_in_span

if TYPE_CHECKING:
    from cpersona.models import ProjectFilter
    from cpersona.storage.interface import Connection, Row, Store
    from cpersona.timerange import TimeRange

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class RowAccess(Generic[T]):
    """`table`'s rows read as `read(row)` from the SELECT list `columns`; `deletable` is the SQL
    condition a row must meet to be deleted (`locked = 0` keeps locked memories), or ''."""

    table: str
    columns: str
    read: Callable[[Row], T]
    deletable: str = ""

    def get(self, conn: Connection, row_id: int) -> T | None:
        if not is_row_id(row_id):
            return None
        sql = f"SELECT {self.columns} FROM {self.table} WHERE id = ?"
        row = conn.execute(sql, (row_id,)).fetchone()
        return None if row is None else self.read(row)

    def fetch(self, db: Store, row_id: int) -> T | None:
        """One row by id, read outside any transaction."""
        with translated():
            return self.get(db.reader(), row_id)

    def delete(self, conn: Connection, row_id: int, agent_id: str | None) -> int:
        """Delete one row (of this agent unless None); the number of rows removed."""
        if not is_row_id(row_id):
            return 0
        where = "id = ?"
        params: list[object] = [row_id]
        if agent_id is not None:
            where += " AND agent_id = ?"
            params.append(agent_id)
        if self.deletable:
            where += f" AND {self.deletable}"
        return conn.execute(f"DELETE FROM {self.table} WHERE {where}", params).rowcount

    def list_newest(
        self,
        db: Store,
        agent_id: str | None,
        project: ProjectFilter,
        limit: int,
        offset: int = 0,
        span: TimeRange | None = None,
    ) -> list[T]:
        """Newest first by (created_at DESC, id DESC), one agent's or all agents' (None);
        `offset` rows of that order skipped (a page of a listing). With `span`, only rows
        whose instant it admits (cpersona.timerange)."""
        where, params = project_where(project)
        sql = f"SELECT {self.columns} FROM {self.table} WHERE {where}"
        args: list[object] = list(params)
        if agent_id is not None:
            sql += " AND agent_id = ?"
            args.append(agent_id)
        if span is not None and db.dialect == "postgresql":
            # The stored instant_key (storage/pg/vectors.py) tests the range in SQL; NULL keys
            # are left to the Python test below.
            sql += " AND (instant_key IS NULL OR (instant_key >= ? AND instant_key < ?))"
            args += span.bounds()
        sql += " ORDER BY created_at DESC, id DESC"
        if span is None:
            rows = db.query(sql + " LIMIT ? OFFSET ?", [*args, limit, offset])
        else:
            stamp = "timestamp" if self.table == "memories" else "start_time"
            cur = db.reader().execute(sql, args)
            rows = first_in_span(cur, span, stamp, "created_at", limit + offset)[offset:]
        return [self.read(row) for row in rows]
