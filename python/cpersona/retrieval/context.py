"""recall_with_context: the caller's conversation merged with recalled rows by instant (§16)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from cpersona.memory.text import parse_utc

_FIELDS = ("role", "content", "name", "user_id", "timestamp")


def field_issues(entries: list[Any]) -> list[dict[str, Any]]:
    """Entries whose declared fields are present but not strings (a non-object is `<entry>`)."""
    issues = []
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict):
            issues.append({"index": i, "fields": ["<entry>"]})
            continue
        bad = sorted(f for f in _FIELDS if f in entry and not isinstance(entry[f], str))
        if bad:
            issues.append({"index": i, "fields": bad})
    return issues


def _get(entry: Any, name: str) -> str | None:
    if isinstance(entry, dict) and isinstance(entry.get(name), str):
        return str(entry[name])
    return None


def exclusions(entries: list[Any]) -> list[str]:
    """Lower-cased contents of every entry with content (any role): recall must not echo them."""
    out = []
    for entry in entries:
        content = (_get(entry, "content") or "").strip()
        if content:
            out.append(content.lower())
    return out


def conversation(entries: list[Any]) -> tuple[list[dict[str, Any]], list[str]]:
    """The user/assistant entries as messages, and the roles that were filtered out."""
    merged: list[dict[str, Any]] = []
    other_roles: set[str] = set()
    for entry in entries:
        content = (_get(entry, "content") or "").strip()
        if not content:
            continue
        role = _get(entry, "role")
        timestamp = _get(entry, "timestamp") or ""
        if role == "assistant":
            source: dict[str, str] = {"type": "Agent", "id": "self"}
        elif role == "user":
            name = _get(entry, "name") or "User"
            user_id = _get(entry, "user_id") or ""
            source = {"type": "User", "id": "discord:" + (user_id or name), "name": name}
        else:
            other_roles.add(role if role else "(unset)")
            continue
        merged.append(
            {
                "content": content,
                "source": source,
                "timestamp": timestamp,
                "context_type": "conversation",
            }
        )
    return merged, sorted(other_roles)


_UNDATED = datetime.min.replace(tzinfo=UTC)


def chronological(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Undated (missing/unparseable) first in given order, then by instant; stable.

    Instants are compared as datetimes: a float POSIX timestamp drops microseconds far from
    1970 (a double has ~16 digits), which would leave such stamps in merge order.
    """

    def key(msg: dict[str, Any]) -> tuple[int, datetime]:
        instant = parse_utc(msg.get("timestamp"))
        return (0, _UNDATED) if instant is None else (1, instant)

    return sorted(messages, key=key)


def issues_note(issues: list[dict[str, Any]], entries: list[Any]) -> str:
    merged, dropped = 0, 0
    for issue in issues:
        entry = entries[issue["index"]]
        content = (_get(entry, "content") or "").strip()
        if content and _get(entry, "role") in ("user", "assistant"):
            merged += 1
        else:
            dropped += 1
    if dropped == 0:
        return "These entries were merged without the named fields, which were not strings."
    if merged == 0:
        return "These entries were dropped: without string fields they had no usable content."
    return (
        "Some of these entries were merged without the named fields; the others were "
        "dropped for lacking usable content."
    )
