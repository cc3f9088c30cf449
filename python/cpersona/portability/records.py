"""The JSONL record format of `cpersona-export/1.0` (surface.md §8.1) and its field rules.

One JSON object per line, UTF-8, non-ASCII unescaped. Export writes these; import reads them
leniently (a missing or mistyped field takes its default) because a file may come from 2.5.x,
from cpersona, or from a hand edit.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from cpersona.memory.text import parse_utc
from cpersona.storage.bulk import EpisodeRecord, MemoryRecord, ProfileRecord

if TYPE_CHECKING:
    import numpy as np

FORMAT_VERSION = "cpersona-export/1.0"


def dumps(obj: dict[str, Any]) -> str:
    """One JSONL line (without the newline)."""
    return json.dumps(obj, ensure_ascii=False)


def header(agent_id: str, memories: int, episodes: int, profiles: int) -> dict[str, Any]:
    return {
        "_type": "header",
        "version": FORMAT_VERSION,
        "agent_id": agent_id,
        "exported_at": datetime.now(UTC).isoformat(),
        "memory_count": memories,
        "episode_count": episodes,
        "has_profile": profiles > 0,
        "profile_count": profiles,
    }


def _parsed(text: str) -> Any:
    """A stored JSON column as a value; `{}` when empty or unparseable."""
    if not text:
        return {}
    try:
        return json.loads(text)
    except ValueError:
        return {}


#: One JSON object of the file.
Row = dict[str, Any]


def _b64(blob: bytes | None) -> str | None:
    return base64.b64encode(blob).decode("ascii") if blob else None


#: Each record's fields in the order of the file (2.5.x's), after `_type`: every one the
#: row's column of that name, written as `_WRITTEN` says where not verbatim.
MEMORY_FIELDS = (
    "id", "agent_id", "msg_id", "content", "source", "timestamp", "metadata", "created_at",
    "project_id", "channel", "locked", "recall_count", "last_recalled_at",
)  # fmt: skip
EPISODE_FIELDS = (
    "id", "agent_id", "summary", "keywords", "start_time", "end_time", "created_at",
    "resolved", "project_id", "channel",
)  # fmt: skip
PROFILE_FIELDS = ("agent_id", "user_id", "content", "updated_at", "project_id")

#: The columns a memory record does not carry as stored: JSON text as its value, the lock
#: flag as 0 or 1.
_WRITTEN: dict[str, Callable[[Any], Any]] = {
    "source": _parsed,
    "metadata": _parsed,
    "locked": lambda flag: 1 if flag else 0,
}


def _record(kind: str, rec: object, names: tuple[str, ...], embedding: bytes | None) -> Row:
    out: Row = {"_type": kind}
    for name in names:
        value = getattr(rec, name)
        out[name] = _WRITTEN[name](value) if name in _WRITTEN else value
    encoded = _b64(embedding)
    if encoded is not None:
        out["embedding_b64"] = encoded
    return out


def memory_json(rec: MemoryRecord, include_embeddings: bool) -> Row:
    return _record("memory", rec, MEMORY_FIELDS, rec.embedding if include_embeddings else None)


def episode_json(rec: EpisodeRecord, include_embeddings: bool) -> Row:
    return _record("episode", rec, EPISODE_FIELDS, rec.embedding if include_embeddings else None)


def profile_json(rec: ProfileRecord) -> Row:
    return _record("profile", rec, PROFILE_FIELDS, None)


# -- reading fields back -------------------------------------------------------------------------


def text_field(record: dict[str, Any], key: str, default: str = "") -> str:
    """A string field; anything else (absent, null, a number) reads as `default`."""
    value = record.get(key)
    return value if isinstance(value, str) else default


def optional_text(record: dict[str, Any], key: str) -> str | None:
    value = record.get(key)
    return value if isinstance(value, str) else None


def int_field(record: dict[str, Any], key: str) -> int:
    value = record.get(key)
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int) and -(2**63) <= value < 2**63:
        return value
    return 0


def json_text(value: Any) -> str:
    """A `source` / `metadata` value re-serialised as stored JSON text (2.5.x's byte style).

    Not normalised and not size-capped (surface.md §8.2, §15 row 15); absent or null -> `{}`.
    """
    return "{}" if value is None else json.dumps(value)


def sqlite_stamp(value: Any) -> tuple[str | None, bool]:
    """A `created_at` / `updated_at` / `last_recalled_at` in SQLite's `YYYY-MM-DD HH:MM:SS` (UTC).

    Returns (stamp, usable): (None, True) when absent, (None, False) when present but naming no
    instant. The vector index orders rows by this column, so it must be canonical.
    """
    if value is None or value == "":
        return None, True
    instant = parse_utc(value)
    if instant is None:
        return None, False
    return (
        f"{instant.year:04d}-{instant.month:02d}-{instant.day:02d} "
        f"{instant.hour:02d}:{instant.minute:02d}:{instant.second:02d}",
        True,
    )


def decode_embedding(value: Any) -> tuple[bytes | None, str | None]:
    """(float32 BLOB, None) from `embedding_b64`, or (None, why it was refused); (None, None)
    when the record carries none."""
    import numpy as np  # on first use: see docs/notes/performance-notes.md, "Start-up"

    if value is None or value == "":
        return None, None
    if not isinstance(value, str):
        return None, "embedding_b64 is not a string"
    try:
        blob = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        return None, "embedding_b64 is not valid base64"
    if not blob or len(blob) % 4:
        return None, f"embedding_b64 holds {len(blob)} bytes, not a whole number of float32s"
    vector = np.frombuffer(blob, dtype="<f4")
    if not np.all(np.isfinite(vector)):
        return None, "embedding_b64 holds a non-finite value"
    return blob, None


def vector_blob(row: np.ndarray) -> bytes | None:
    """A provider's output row as a float32 BLOB, or None when it is not a usable vector."""
    import numpy as np  # on first use: see docs/notes/performance-notes.md, "Start-up"

    flat = np.asarray(row, dtype=np.float32).reshape(-1)
    if flat.size == 0 or not np.all(np.isfinite(flat)):
        return None
    return flat.astype("<f4").tobytes()
