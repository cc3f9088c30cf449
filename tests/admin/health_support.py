"""Helpers of the health tests: damage a database, read a report."""

from __future__ import annotations

from typing import Any

from cpersona.engine import Engine


def plant(engine: Engine, *statements: str | tuple[str, tuple[Any, ...]]) -> None:
    """Damage the database behind the server's back, in one transaction."""
    with engine.db.atomic() as conn:
        for statement in statements:
            if isinstance(statement, tuple):
                conn.execute(*statement)
            else:
                conn.execute(statement)


def of(report: dict[str, Any], check: str) -> list[dict[str, Any]]:
    """The issues one check produced."""
    return [i for i in report["issues"] if i.get("check") == check]


def rows(engine: Engine, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    return [tuple(r) for r in engine.db.query(sql, params)]


async def corpus(tools: Any, n: int = 6, agent: str = "a") -> list[int]:
    ids = []
    for i in range(n):
        out = await tools(
            "store",
            {
                "agent_id": agent,
                "message": {
                    "content": f"memory {i}: the release train leaves at {i} o'clock "
                    f"from platform {i}",
                    "source": {"type": "User", "id": "u1", "name": "Ann"},
                },
            },
        )
        ids.append(out["id"])
    await tools("update_profile", {"agent_id": agent, "profile": "likes trains"})
    return ids


async def planted(tools: Any, *statements: str, n: int = 6) -> list[int]:
    """The corpus of agent a, then `statements` planted in it (`plant`); `{0}`, `{1}`, ... in a
    statement name the ids of the corpus's rows (str.format). Returns those ids."""
    ids = await corpus(tools, n=n)
    plant(tools.engine, *(statement.format(*ids) for statement in statements))
    return ids


def hours_ago(hours: int) -> str:
    """UTC `hours` ago in SQLite's `datetime('now')` text, as a literal both backends store."""
    from datetime import UTC, datetime, timedelta

    return (datetime.now(UTC) - timedelta(hours=hours)).strftime("%Y-%m-%d %H:%M:%S")
