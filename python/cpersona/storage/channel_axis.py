"""SQL of the channel-axis migration (surface.md §8.4): `discord`-channel memories moved to
the channel their `metadata.session_id` names (a Discord snowflake, then ':'), or to channel
'' when it names none, never onto a row that already holds the new identity.

Written once for both backends; the JSON member, the GLOB match and the colon's position come
from the connection's operations (storage/ops.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from cpersona.storage.interface import Connection
from cpersona.storage.ops import SqlOps, ops_of


def _agent(agent_id: str | None) -> tuple[str, tuple[str, ...]]:
    return ("memories.agent_id = ?", (agent_id,)) if agent_id is not None else ("TRUE", ())


#: A Discord snowflake channel id, then ':' (`<channel>:<user>:<chunk>` or `<channel>:shared`).
SNOWFLAKE_SESSION_GLOB = "[0-9]*:*"


@dataclass(frozen=True, slots=True)
class _ChannelSql:
    """The channel migration's expressions in one backend's SQL, over the columns of
    `memories` qualified by its name (so they also read the outer row inside a subquery).
    `recoverable` and `unrecoverable` each bind `glob` first."""

    session_id: str
    recovered: str
    recoverable: str
    unrecoverable: str
    invalid_metadata: str
    glob: str


def _channel_sql(ops: SqlOps) -> _ChannelSql:
    # json_text never raises on malformed JSON: such a row reads as "no session_id".
    session = ops.json_text("memories.metadata", "session_id")
    discord = "memories.channel = 'discord'"
    colon = "':'"
    return _ChannelSql(
        session_id=session,
        recovered=f"substr({session}, 1, {ops.position(colon, session)} - 1)",
        recoverable=f"{discord} AND {ops.glob_match(session)}",
        unrecoverable=f"{discord} AND ({session} IS NULL OR NOT ({ops.glob_match(session)}))",
        invalid_metadata=f"{discord} AND NOT ({ops.json_valid('memories.metadata')})",
        glob=ops.glob_param(SNOWFLAKE_SESSION_GLOB),
    )


@dataclass(frozen=True, slots=True)
class ChannelReport:
    """What a `discord`-channel migration would do."""

    by_channel: list[tuple[str, int]]  # recovered channel, rows; most rows first
    discord_total: int
    invalid_metadata_total: int
    invalid_metadata_ids: list[int]
    samples: list[tuple[int, str, str]]  # id, recovered channel, session_id

    @property
    def recoverable_total(self) -> int:
        return sum(n for _, n in self.by_channel)


def channel_report(
    conn: Connection, agent_id: str | None, *, sample: int = 5, invalid_ids: int = 10
) -> ChannelReport:
    sql = _channel_sql(ops_of(conn))
    where, params = _agent(agent_id)
    glob = (sql.glob, *params)
    by_channel = [
        (str(r[0]), int(r[1]))
        for r in conn.execute(
            f"SELECT {sql.recovered} AS ch, COUNT(*) AS n FROM memories "
            f"WHERE {sql.recoverable} AND {where} GROUP BY ch ORDER BY n DESC, ch",
            glob,
        )
    ]
    total = int(
        conn.execute(
            f"SELECT COUNT(*) FROM memories WHERE memories.channel = 'discord' AND {where}",
            params,
        ).fetchone()[0]
    )
    invalid_total = int(
        conn.execute(
            f"SELECT COUNT(*) FROM memories WHERE {sql.invalid_metadata} AND {where}", params
        ).fetchone()[0]
    )
    invalid = [
        int(r[0])
        for r in conn.execute(
            f"SELECT id FROM memories WHERE {sql.invalid_metadata} AND {where} ORDER BY id LIMIT ?",
            (*params, invalid_ids),
        )
    ]
    samples = [
        (int(r[0]), str(r[1]), str(r[2]))
        for r in conn.execute(
            f"SELECT id, {sql.recovered}, {sql.session_id} FROM memories "
            f"WHERE {sql.recoverable} AND {where} ORDER BY id LIMIT ?",
            (*glob, sample),
        )
    ]
    return ChannelReport(by_channel, total, invalid_total, invalid, samples)


def rechannel_recoverable(conn: Connection, agent_id: str | None) -> int:
    """Move recoverable `discord` rows to their channel; a row whose new identity collides
    with the content UNIQUE index stays unchanged. The number of rows moved."""
    sql = _channel_sql(ops_of(conn))
    where, params = _agent(agent_id)
    return _rechannel(conn, sql.recovered, f"{sql.recoverable} AND {where}", (sql.glob, *params))


def globalize_unrecoverable(conn: Connection, agent_id: str | None) -> int:
    """Move the unrecoverable `discord` rows to channel '' (collisions stay); rows moved."""
    sql = _channel_sql(ops_of(conn))
    where, params = _agent(agent_id)
    return _rechannel(conn, "''", f"{sql.unrecoverable} AND {where}", (sql.glob, *params))


def _rechannel(conn: Connection, channel: str, where: str, params: tuple[object, ...]) -> int:
    """Set `channel` (an expression over the row) on the rows `where` selects, except a row
    whose new identity another row already holds in the content UNIQUE index (agent,
    project, channel, content): it stays, as `UPDATE OR IGNORE` would leave it. The number
    of rows moved.

    One statement: the moved rows are all in channel `discord` and leave it, so no two of
    them can take the same new identity; only a row already in place can hold it."""
    return conn.execute(
        f"UPDATE memories SET channel = {channel} WHERE {where} AND NOT EXISTS ("
        "SELECT 1 FROM memories o WHERE o.agent_id = memories.agent_id "
        f"AND o.project_id = memories.project_id AND o.channel = {channel} "
        "AND o.content = memories.content)",
        params,
    ).rowcount
