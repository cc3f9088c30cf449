"""What the read-only web view needs beyond the tools' listings: the agents and their counts."""

from __future__ import annotations

from dataclasses import dataclass

from cpersona.storage.interface import Store


@dataclass(frozen=True, slots=True)
class AgentCounts:
    agent_id: str
    memories: int
    episodes: int
    profiles: int


def agents(db: Store) -> list[AgentCounts]:
    """Every agent that owns a row of any kind, by id, with its row counts."""
    rows = db.query(
        """SELECT agent_id, SUM(m), SUM(e), SUM(p) FROM (
               SELECT agent_id, COUNT(*) AS m, 0 AS e, 0 AS p FROM memories GROUP BY agent_id
               UNION ALL
               SELECT agent_id, 0, COUNT(*), 0 FROM episodes GROUP BY agent_id
               UNION ALL
               SELECT agent_id, 0, 0, COUNT(*) FROM profiles GROUP BY agent_id
           ) GROUP BY agent_id ORDER BY agent_id"""
    )
    return [AgentCounts(str(r[0]), int(r[1]), int(r[2]), int(r[3])) for r in rows]
