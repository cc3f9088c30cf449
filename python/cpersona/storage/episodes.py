"""SQL for the `episodes` table."""

from __future__ import annotations

from cpersona.models import Episode, NewEpisode, ProjectFilter
from cpersona.storage.db import is_row_id, newest, row_params
from cpersona.storage.error_kinds import translating
from cpersona.storage.interface import Connection, Row, Store
from cpersona.storage.rows import EpisodeRow, build, insert_sql, projection
from cpersona.timerange import TimeRange

#: The listing's row (`models.Episode`): every column but the embedding, and whether it has one.
_COLUMNS = projection(Episode, EpisodeRow, {"embedded": "embedding IS NOT NULL"}).select_list()
#: What `store_episode` writes (`models.NewEpisode`); the database fills in the rest.
_WRITTEN = projection(NewEpisode, EpisodeRow).names
_INSERT = insert_sql("episodes", _WRITTEN, "RETURNING id")


def _episode(row: Row) -> Episode:
    return build(Episode, row)


def insert(conn: Connection, new: NewEpisode) -> int:
    cur = conn.execute(_INSERT, row_params(conn, new, _WRITTEN))
    rows = cur.fetchall()  # to the end: SQLite finishes an INSERT ... RETURNING only then
    return int(rows[0][0])


def get(conn: Connection, episode_id: int) -> Episode | None:
    if not is_row_id(episode_id):
        return None
    row = conn.execute(f"SELECT {_COLUMNS} FROM episodes WHERE id = ?", (episode_id,)).fetchone()
    return None if row is None else _episode(row)


@translating
def fetch(db: Store, episode_id: int) -> Episode | None:
    """One row by id, read outside any transaction."""
    return get(db.reader(), episode_id)


def delete(conn: Connection, episode_id: int, agent_id: str | None) -> int:
    if not is_row_id(episode_id):
        return 0
    if agent_id is None:
        cur = conn.execute("DELETE FROM episodes WHERE id = ?", (episode_id,))
    else:
        cur = conn.execute(
            "DELETE FROM episodes WHERE id = ? AND agent_id = ?", (episode_id, agent_id)
        )
    return cur.rowcount


def list_newest(
    db: Store,
    agent_id: str | None,
    project: ProjectFilter,
    limit: int,
    offset: int = 0,
    span: TimeRange | None = None,
) -> list[Episode]:
    """Newest first by created_at (ties: higher id first); agent None = all agents; with
    `span`, only rows whose instant it admits (cpersona.timerange)."""
    rows = newest(db, "episodes", _COLUMNS, agent_id, project, limit, offset, span)
    return [_episode(row) for row in rows]
