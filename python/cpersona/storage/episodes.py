"""SQL for the `episodes` table."""

from __future__ import annotations

from cpersona.models import Episode, NewEpisode
from cpersona.storage.db import row_params
from cpersona.storage.interface import Connection, Row
from cpersona.storage.row_access import RowAccess
from cpersona.storage.rows import EpisodeRow, build, insert_sql, projection

#: The listing's row (`models.Episode`): every column but the embedding, and whether it has one.
_COLUMNS = projection(Episode, EpisodeRow, {"embedded": "embedding IS NOT NULL"}).select_list()
#: What `store_episode` writes (`models.NewEpisode`); the database fills in the rest.
_WRITTEN = projection(NewEpisode, EpisodeRow).names
_INSERT = insert_sql("episodes", _WRITTEN, "RETURNING id")


def _episode(row: Row) -> Episode:
    return build(Episode, row)


_ROWS = RowAccess("episodes", _COLUMNS, _episode)
get = _ROWS.get
fetch = _ROWS.fetch
delete = _ROWS.delete
list_newest = _ROWS.list_newest


def insert(conn: Connection, new: NewEpisode) -> int:
    cur = conn.execute(_INSERT, row_params(conn, new, _WRITTEN))
    rows = cur.fetchall()  # to the end: SQLite finishes an INSERT ... RETURNING only then
    return int(rows[0][0])
