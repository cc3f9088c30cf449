"""Helpers of the recall tests: corpus texts, databases of scoped rows for the tests of recall's
SQL, and readers of recall answers (the tool caller is tests/support/mcp_client.py)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

from cpersona.storage import Database, open_database
from support.mcp_client import AGENT  # noqa: F401 (re-exported)

#: Found by FTS for IDENT; with the hashing embedder its cosine to the bare identifier is ~0.12:
#: below the vector threshold under rrf / rsf (0.15), so only the lexical channels find it.
IDENT = "CVE-2024-3094"
LEXICAL = (
    "Quarterly security digest: we rotated credentials, refreshed dependency pins, "
    "reviewed firewall rules, archived stale accounts, retrained staff on phishing, "
    "replaced expiring certificates, validated backups, tightened container policies, "
    "documented vendor contacts, rehearsed incident drills, updated asset inventories, "
    "and confirmed the CVE-2024-3094 remediation across every fleet."
)


#: The `timestamp` of a memory whose stamp a test does not look at.
STAMP = "2024-01-01T00:00:00+00:00"


@contextmanager
def scoped_rows(
    memories: Iterable[tuple[str, str, str, str]],
    episodes: Iterable[tuple[str, str, str]] = (),
) -> Iterator[Database]:
    """A fresh in-memory database holding `memories` as (agent, project, channel, timestamp)
    and `episodes` as (agent, project, channel), ids from 1 in that order, written straight
    into the tables (no engine); closed on leaving."""
    db = open_database(":memory:")
    try:
        with db.atomic() as conn:
            for i, (agent, project, channel, stamp) in enumerate(memories):
                conn.execute(
                    "INSERT INTO memories (agent_id, project_id, channel, content, timestamp) "
                    "VALUES (?, ?, ?, ?, ?)",
                    (agent, project, channel, f"note {i}", stamp),
                )
            for i, (agent, project, channel) in enumerate(episodes):
                conn.execute(
                    "INSERT INTO episodes (agent_id, project_id, channel, summary) "
                    "VALUES (?, ?, ?, ?)",
                    (agent, project, channel, f"episode {i}"),
                )
        yield db
    finally:
        db.close()


def iso(t: datetime) -> str:
    return t.astimezone(UTC).isoformat(timespec="seconds")


def hours_before(t: datetime, hours: float) -> str:
    return iso(t - timedelta(hours=hours))


def scores(messages: list[dict[str, Any]]) -> list[float]:
    return [m["match_reason"]["score"] for m in messages]


def refs(messages: list[dict[str, Any]]) -> list[str | None]:
    return [m.get("ref") for m in messages]
