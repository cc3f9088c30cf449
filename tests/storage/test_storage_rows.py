"""The row types (storage/rows.py, issue 18): one per data table, the table's columns in its
order on both backends, and every shape that carries part of a row a projection of it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from cpersona import models
from cpersona.storage import Database, open_database
from cpersona.storage import bulk as portability_sql
from cpersona.storage import embeddings as vector_sql
from cpersona.storage import fulltext as fts_sql
from cpersona.storage import search as retrieval_sql
from cpersona.storage.rows import (
    TABLE,
    EpisodeRow,
    MemoryRow,
    ProfileRow,
    columns,
    projection,
    select_list,
)
from cpersona.storage.upkeep.sources import SourceRow
from cpersona.storage.upkeep.stamps import MemoryStamp
from cpersona.storage.upkeep.texts import MemoryFlag


@pytest.fixture
def db(
    store_backend: str, tmp_path: Path, database_url_for: Callable[[str], str | None]
) -> Iterator[Database]:
    database = open_database(str(tmp_path / "rows.db"), database_url=database_url_for("rows.db"))
    yield database
    database.close()


def _table_columns(db: Database, table: str) -> list[str]:
    if db.dialect == "postgresql":
        # Generated columns (the keys PostgreSQL's indexes read) are computed from the row.
        rows = db.query(
            "SELECT column_name FROM information_schema.columns WHERE table_name = ? "
            "AND table_schema = current_schema() AND is_generated = 'NEVER' "
            "ORDER BY ordinal_position",
            (table,),
        )
        return [str(r[0]) for r in rows]
    return [str(r["name"]) for r in db.query(f"PRAGMA table_info({table})")]


@pytest.mark.parametrize("row", [MemoryRow, EpisodeRow, ProfileRow], ids=lambda r: r.__name__)
def test_a_row_type_is_its_tables_columns_in_order(db: Database, row: type) -> None:
    assert list(columns(row)) == _table_columns(db, TABLE[row])


# Every shape of part of a row, and the fields it computes or fills in rather than reads.
SHAPES = [
    (models.Memory, MemoryRow, {"embedded"}),
    (models.Episode, EpisodeRow, {"embedded"}),
    (portability_sql.MemoryRecord, MemoryRow, set()),
    (portability_sql.EpisodeRecord, EpisodeRow, set()),
    (portability_sql.ProfileRecord, ProfileRow, set()),
    (retrieval_sql.MemoryHit, MemoryRow, {"bm25"}),
    (retrieval_sql.EpisodeHit, EpisodeRow, {"bm25"}),
    (vector_sql.IndexRow, MemoryRow, {"key", "source_id", "time"}),
    (vector_sql.IndexRow, EpisodeRow, {"key", "source_id", "time"}),
    (fts_sql.FtsRow, MemoryRow, {"key", "source_id", "columns", "time"}),
    (fts_sql.FtsRow, EpisodeRow, {"key", "source_id", "columns", "time"}),
    (MemoryFlag, MemoryRow, {"n"}),
    (MemoryStamp, MemoryRow, set()),
    (SourceRow, MemoryRow, set()),
]


@pytest.mark.parametrize(
    ("shape", "row", "computed"), SHAPES, ids=[f"{s.__name__}-{r.__name__}" for s, r, _ in SHAPES]
)
def test_every_shape_of_a_row_reads_the_rows_columns_with_their_types(
    shape: type, row: type, computed: set[str]
) -> None:
    read = projection(shape, row, extra=tuple(computed)).names
    assert set(read) <= set(columns(row))
    assert read  # a shape that reads no column of the row is not one of its shapes


def test_the_full_row_records_are_the_row_types() -> None:
    assert portability_sql.MemoryRecord is MemoryRow
    assert portability_sql.EpisodeRecord is EpisodeRow
    assert portability_sql.ProfileRecord is ProfileRow


def test_a_shape_that_drifts_from_its_row_fails_where_it_is_declared() -> None:
    @dataclass(frozen=True)
    class Retyped:
        id: int
        content: bytes

    @dataclass(frozen=True)
    class Renamed:
        id: int
        text: str

    with pytest.raises(TypeError, match=r"Retyped\.content is bytes.*memories\.content is str"):
        projection(Retyped, MemoryRow)
    with pytest.raises(TypeError, match=r"Renamed\.text is no column of memories"):
        projection(Renamed, MemoryRow)


def test_a_select_list_reads_a_projections_fields_in_order() -> None:
    hit = projection(retrieval_sql.MemoryHit, MemoryRow, extra=("bm25",))
    assert hit.select_list("m") == (
        "m.id, m.msg_id, m.content, m.source, m.timestamp, m.channel, m.project_id, m.agent_id"
    )
    listing = projection(models.Memory, MemoryRow, {"embedded": "embedding IS NOT NULL"})
    assert listing.select_list().endswith("created_at, embedding IS NOT NULL AS embedded")
    assert select_list(("id", "content"), "x") == "x.id, x.content"
