"""SQL of the legacy `pending_memory_tasks` queue (surface.md §9.6): read, count, delete."""

from __future__ import annotations

from dataclasses import dataclass

from cpersona.storage.interface import Store


@dataclass(frozen=True, slots=True)
class Task:
    id: int
    task_type: str
    agent_id: str
    payload: str
    retries: int


def count(db: Store, agent_id: str | None = None) -> int:
    if agent_id:
        row = db.query_one(
            "SELECT COUNT(*) FROM pending_memory_tasks WHERE agent_id = ?", (agent_id,)
        )
    else:
        row = db.query_one("SELECT COUNT(*) FROM pending_memory_tasks")
    return int(row[0]) if row else 0


def oldest(db: Store) -> Task | None:
    """The first task in FIFO (id) order, or None when the queue is empty."""
    row = db.query_one(
        "SELECT id, task_type, agent_id, payload, retries FROM pending_memory_tasks "
        "ORDER BY id LIMIT 1"
    )
    if row is None:
        return None
    return Task(int(row[0]), str(row[1]), str(row[2]), str(row[3]), int(row[4]))


def delete(db: Store, task_id: int) -> None:
    with db.atomic() as conn:
        conn.execute("DELETE FROM pending_memory_tasks WHERE id = ?", (task_id,))


def bump_retries(db: Store, task_id: int) -> None:
    with db.atomic() as conn:
        conn.execute(
            "UPDATE pending_memory_tasks SET retries = retries + 1 WHERE id = ?", (task_id,)
        )
