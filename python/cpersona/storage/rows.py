"""The row types: one per data table, its column list declared once, as that type's fields.

`MemoryRow`, `EpisodeRow` and `ProfileRow` are a whole row each, every column in the table's
order (tests/storage/test_storage_rows.py compares them with the tables both backends create);
their leading columns are declared in `models` (`AgentRow`, `MemoryHead`, `EpisodeHead`),
which the listing's `Memory` and `Episode` extend too, and PostgreSQL's CREATE TABLE takes its
column list from them (storage/pg/schema.py).
Everything else that carries part of a row is a *projection* of one of them: the listing's
`models.Memory`, the recall hits `storage.retrieval.MemoryHit`, the index rows, the health
checks' flags. A projection's fields that are columns must be the row's columns with the row's
types (nullability aside: a NOT NULL column may be read as `str`, a record may leave a
default to the database as `None`); its other fields are derived and declared as such with
the SQL that computes them. `projection()` checks that when a module is imported, and the
SELECT lists of those modules are built from it (`select_list`), so a column is named in one
place and a projection cannot drift from it unnoticed.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from cpersona.models import AgentRow, EpisodeHead, MemoryHead

if TYPE_CHECKING:
    from cpersona.storage.interface import Row

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class MemoryRow(MemoryHead):
    """One row of `memories`."""

    embedding: bytes | None
    channel: str
    recall_count: int
    last_recalled_at: str | None
    locked: bool
    created_at: str | None  # None on insert: the database's datetime('now')


@dataclass(frozen=True, slots=True)
class EpisodeRow(EpisodeHead):
    """One row of `episodes`."""

    embedding: bytes | None
    start_time: str | None
    end_time: str | None
    resolved: bool
    channel: str
    created_at: str | None  # None on insert: the database's datetime('now')


@dataclass(frozen=True, slots=True)
class ProfileRow(AgentRow):
    """One row of `profiles`."""

    user_id: str
    content: str
    updated_at: str | None  # None on insert: the database's datetime('now')


#: The table each row type is a row of.
TABLE = {MemoryRow: "memories", EpisodeRow: "episodes", ProfileRow: "profiles"}


def columns(row: type) -> tuple[str, ...]:
    """The table's columns in its order: the row type's fields."""
    return tuple(f.name for f in dataclasses.fields(row))


def _base(annotation: object) -> frozenset[str]:
    """The types of an annotation (a string under `from __future__ import annotations`)
    without None: nullability may differ between a row and a projection."""
    parts = {p.strip() for p in str(annotation).split("|")}
    return frozenset(parts - {"None"})


@dataclass(frozen=True, slots=True)
class Projection:
    """Which columns of `row` a shape reads (in its field order), and the SQL of the fields
    it derives."""

    row: type
    shape: type
    names: tuple[str, ...]
    derived: Mapping[str, str]

    def select_list(self, alias: str = "") -> str:
        """The SELECT list that reads the shape's fields in order, `alias.`-qualified."""
        return select_list(self.names, alias, self.derived)


def projection(
    shape: type, row: type, derived: Mapping[str, str] | None = None, *, extra: tuple[str, ...] = ()
) -> Projection:
    """`shape` as a projection of `row`: every field of `shape` is a column of `row` with its
    type, a `derived` field (name -> the SQL that computes it), or one of `extra` (filled in
    Python: a score, a parsed value). Raises TypeError when a field is none of these or its
    type is not the column's: a shape re-typed away from its row fails at import."""
    derived = dict(derived or {})
    row_types = {f.name: f.type for f in dataclasses.fields(row)}
    names: list[str] = []
    for f in dataclasses.fields(shape):
        if f.name in derived or f.name in extra:
            continue
        if f.name not in row_types:
            raise TypeError(f"{shape.__name__}.{f.name} is no column of {TABLE[row]}")
        if _base(f.type) != _base(row_types[f.name]):
            raise TypeError(
                f"{shape.__name__}.{f.name} is {f.type}, the column {TABLE[row]}.{f.name} "
                f"is {row_types[f.name]}"
            )
        names.append(f.name)
    return Projection(row, shape, tuple(names), derived)


def select_list(
    names: tuple[str, ...], alias: str = "", derived: Mapping[str, str] | None = None
) -> str:
    """`names` as a SELECT list (`alias.`-qualified), then each derived field `expr AS name`
    (its expression qualified by the caller)."""
    prefix = f"{alias}." if alias else ""
    parts = [f"{prefix}{n}" for n in names]
    parts += [f"{expr} AS {name}" for name, expr in (derived or {}).items()]
    return ", ".join(parts)


@functools.cache
def _reads(shape: type) -> tuple[tuple[str, bool], ...]:
    return tuple((f.name, _base(f.type) == {"bool"}) for f in dataclasses.fields(shape))


def build(shape: Callable[..., T], row: Row, **given: Any) -> T:
    """A `shape` (a row type or a projection's shape) from a row read by column name: every
    field the caller does not give is the column of its name, a `bool` field read as a truth
    value (SQLite reads a boolean column back as 0 or 1)."""
    values = {}
    for name, is_bool in _reads(shape):
        if name in given:
            values[name] = given[name]
        else:
            value = row[name]
            values[name] = bool(value) if is_bool else value
    return shape(**values)


def insert_sql(
    table: str, names: tuple[str, ...], tail: str = "", marks: Mapping[str, str] | None = None
) -> str:
    """`INSERT INTO table (names) VALUES (?, ...) tail`, a column's placeholder `marks[name]`
    where given (an SQL expression around the `?`)."""
    values = ", ".join((marks or {}).get(n, "?") for n in names)
    return f"INSERT INTO {table} ({', '.join(names)}) VALUES ({values}) {tail}".rstrip()
