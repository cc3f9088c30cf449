"""Text rules shared by every write path: sanitising, caps, source shapes, timestamps."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from typing import Any

_ANNOTATION = re.compile(r"\[Memory from [^\]]+\]\s*")
_SURROGATE = re.compile("[\ud800-\udfff]")


def sanitize(text: str, cap: int) -> tuple[str, bool]:
    """Strip `[Memory from ...]` annotations and outer whitespace, then cut to `cap` characters.

    Returns the text and whether the cap cut it (not whether the annotation made it long).
    """
    cleaned = _ANNOTATION.sub("", text).strip()
    if len(cleaned) > cap:
        return cleaned[:cap], True
    return cleaned, False


def first_surrogate(text: str) -> int | None:
    """Index of the first lone UTF-16 surrogate (not storable as UTF-8), or None."""
    match = _SURROGATE.search(text)
    return None if match is None else match.start()


def py_json(value: Any) -> str:
    """JSON text in the style of Python's default `json.dumps` (2.5.x's byte format)."""
    return json.dumps(value)


_TYPE_WORDS = {
    "user": "User",
    "agent": "Agent",
    "assistant": "Agent",
    "ai": "Agent",
    "system": "System",
    "session": "System",
}
_CANONICAL = ("User", "Agent", "System")


def normalize_source(source: Any) -> Any:
    """Fold legacy `source` shapes into `{type, id, name}` (surface.md §5.3)."""
    if source is None:
        return {}
    if isinstance(source, dict):
        kind = source.get("type")
        if isinstance(kind, str):
            if kind in _CANONICAL:
                return source
            folded = _TYPE_WORDS.get(kind.strip().lower())
            return {**source, "type": folded} if folded else source
        if len(source) == 1:
            ((key, value),) = source.items()
            if key in _CANONICAL:
                if isinstance(value, dict):
                    inner = dict(value)
                    inner["type"] = key
                    inner.setdefault("id", "")
                    inner.setdefault("name", "")
                    return inner
                if isinstance(value, str):
                    name = "" if key == "System" else value
                    return {"type": key, "id": value, "name": name}
        return source
    if isinstance(source, str):
        bare = {"user": "User", "assistant": "Agent", "ai": "Agent"}.get(source.strip().lower())
        if bare:
            return {"type": bare, "id": "", "name": ""}
    return source


def utc_now_iso() -> str:
    """The server's default memory timestamp: UTC, microseconds, `+00:00`."""
    # timespec: isoformat() drops the fraction when it is zero (once in a million calls).
    return datetime.now(UTC).isoformat(timespec="microseconds")


def parse_utc(stamp: Any) -> datetime | None:
    """The instant a timestamp names, in UTC; None when it names none (retrieval.md §0.1).

    Naive stamps are UTC; `Z` means +00:00; an instant outside the representable range is
    unparseable rather than an error (retrieval.md §19.3).
    """
    if not isinstance(stamp, str) or not stamp:
        return None
    try:
        parsed = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
        if parsed.tzinfo is None:
            return parsed.replace(tzinfo=UTC)
        return parsed.astimezone(UTC)
    except (ValueError, OverflowError):
        return None
