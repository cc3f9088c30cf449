"""SQL for the `episodes` table."""

from __future__ import annotations

from cpersona.models import Episode, NewEpisode, ProjectFilter
from cpersona.storage.db import embedding_param, is_row_id, newest
from cpersona.storage.error_kinds import translating
from cpersona.storage.interface import Connection, Row, Store
from cpersona.storage.rows import EpisodeRow, projection
from cpersona.timerange import TimeRange

#: The listing's row (`models.Episode`): every column but the embedding, and whether it has one.
_COLUMNS = projection(Episode, EpisodeRow, {"embedded": "embedding IS NOT NULL"}).select_list()


def _episode(row: Row) -> Episode:
    return Episode(
        id=row["id"],
        agent_id=row["agent_id"],
        project_id=row["project_id"],
        summary=row["summary"],
        keywords=row["keywords"],
        start_time=row["start_time"],
        end_time=row["end_time"],
        resolved=bool(row["resolved"]),
        channel=row["channel"],
        created_at=row["created_at"],
        embedded=bool(row["embedded"]),
    )


def insert(conn: Connection, new: NewEpisode) -> int:
    rows = conn.execute(
        """INSERT INTO episodes (agent_id, project_id, summary, keywords, embedding,
                                 start_time, end_time, resolved, channel)
           VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id""",
        (
            new.agent_id,
            new.project_id,
            new.summary,
            new.keywords,
            embedding_param(conn, new.embedding),
            new.start_time,
            new.end_time,
            1 if new.resolved else 0,
            new.channel,
        ),
    ).fetchall()  # to the end: SQLite finishes an INSERT ... RETURNING only then
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
