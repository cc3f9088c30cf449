"""Helpers of the recall tests: corpus texts and readers of recall answers (the tool caller
is tests/support/mcp_client.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

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


def iso(t: datetime) -> str:
    return t.astimezone(UTC).isoformat(timespec="seconds")


def hours_before(t: datetime, hours: float) -> str:
    return iso(t - timedelta(hours=hours))


def scores(messages: list[dict[str, Any]]) -> list[float]:
    return [m["match_reason"]["score"] for m in messages]


def refs(messages: list[dict[str, Any]]) -> list[str | None]:
    return [m.get("ref") for m in messages]
