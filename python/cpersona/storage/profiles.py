"""SQL for the `profiles` table: one row per (agent_id, user_id); tools bind user_id = ''."""

from __future__ import annotations

from cpersona.storage.interface import Connection, Store
from cpersona.storage.ops import ops_of

#: The agent's profile text (one `?`: the agent); also a subquery of recall's scope read
#: (storage/search.scope_facts).
GET = "SELECT content FROM profiles WHERE agent_id = ? AND user_id = ''"


def get(db: Store, agent_id: str) -> str | None:
    row = db.query_one(GET, (agent_id,))
    return None if row is None else str(row[0])


def upsert(conn: Connection, agent_id: str, content: str) -> None:
    """Replace the agent's profile (never append); a new row keeps project_id ''."""
    conn.execute(
        f"""INSERT INTO profiles (agent_id, user_id, content) VALUES (?, '', ?)
           ON CONFLICT(agent_id, user_id)
           DO UPDATE SET content = excluded.content, updated_at = {ops_of(conn).now()}""",
        (agent_id, content),
    )
