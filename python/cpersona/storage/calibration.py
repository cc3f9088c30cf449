"""SQL of calibration (retrieval.md §15): random embedding samples, widths, pseudo-queries.

Random samples draw ids first (`ORDER BY RANDOM()` over the integer key only) and read the
BLOBs of the chosen ids afterwards, so a large table is never sorted together with its vectors.
"""

from __future__ import annotations

from dataclasses import dataclass

from cpersona.storage import search
from cpersona.storage.interface import Store


@dataclass(frozen=True, slots=True)
class TimedEmbedding:
    """A memory's caller-facing timestamp and its stored vector BLOB."""

    timestamp: str
    blob: bytes


@dataclass(frozen=True, slots=True)
class PseudoQuery:
    """A memory drawn to act as a query in a fused-gate draw (§15.4)."""

    id: int
    content: str
    timestamp: str


def _agent_filter(agent_id: str) -> tuple[str, list[object]]:
    # An empty agent id means every agent (global calibration, surface.md §6.3).
    return ("agent_id = ?", [agent_id]) if agent_id else ("TRUE", [])


def sample_embeddings(db: Store, agent_id: str, n: int) -> list[bytes]:
    """Up to `n` random embedded memories' BLOBs (all agents when `agent_id` is empty)."""
    where, params = _agent_filter(agent_id)
    ids = [
        int(r[0])
        for r in db.query(
            f"""SELECT id FROM memories WHERE embedding IS NOT NULL AND {where}
                ORDER BY RANDOM() LIMIT ?""",
            [*params, n],
        )
    ]
    # The batched read by id is search's (the cosine backfill's); the draw's order is kept.
    stored = search.embeddings(db, "memories", ids)
    return [stored[i] for i in ids if i in stored]


def newest_timed_embeddings(db: Store, agent_id: str, n: int) -> list[TimedEmbedding]:
    """Up to `n` embedded memories with a timestamp, newest first by the instant it names.

    Stamps SQLite cannot read sort last; the caller parses (and drops) them with §0.1.
    """
    where, params = _agent_filter(agent_id)
    instant = db.ops.stamp_instant("memories")
    rows = db.query(
        f"""SELECT timestamp, embedding FROM memories
            WHERE embedding IS NOT NULL AND timestamp IS NOT NULL AND {where}
            ORDER BY {instant} IS NULL, {instant} DESC, id DESC
            LIMIT ?""",
        [*params, n],
    )
    return [TimedEmbedding(str(r[0]), bytes(r[1])) for r in rows]


def embedding_widths(db: Store) -> dict[int, int]:
    """{BLOB length in bytes: number of memories} over every embedded memory."""
    rows = db.query(
        f"SELECT {db.ops.byte_length('embedding')}, COUNT(*) FROM memories "
        "WHERE embedding IS NOT NULL GROUP BY 1"
    )
    return {int(r[0]): int(r[1]) for r in rows}


def embedded_agents(db: Store) -> list[str]:
    """Every agent with at least one embedded memory, in agent order."""
    rows = db.query(
        "SELECT DISTINCT agent_id FROM memories WHERE embedding IS NOT NULL ORDER BY agent_id"
    )
    return [str(r[0]) for r in rows]


def pseudo_queries(db: Store, agent_id: str, n: int) -> list[PseudoQuery]:
    """Up to `n` random memories of one agent with an embedding, content and a timestamp."""
    rows = db.query(
        """SELECT id, content, timestamp FROM memories
           WHERE agent_id = ? AND embedding IS NOT NULL AND content IS NOT NULL
             AND timestamp IS NOT NULL
           ORDER BY RANDOM() LIMIT ?""",
        [agent_id, n],
    )
    return [PseudoQuery(int(r[0]), str(r[1]), str(r[2])) for r in rows]
