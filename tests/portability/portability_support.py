"""Helpers of the portability tests: readers of exported files and of stored vectors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from cpersona.config import Settings
from cpersona.storage import open_database


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def blobs(settings: Settings, table: str) -> dict[int, bytes | None]:
    """id -> embedding BLOB of a table, read beside the server (either backend)."""
    db = open_database(settings.db_path, database_url=settings.database_url, pool_size=1)
    try:
        return {row[0]: row[1] for row in db.query(f"SELECT id, embedding FROM {table}")}
    finally:
        db.close()


def import_answer(
    memories: tuple[int, int], episodes: tuple[int, int], **more: Any
) -> dict[str, Any]:
    """import_memories' answer for (imported, skipped) memories and episodes, with the
    profile updated; `more` adds or overrides keys (e.g. embedded_on_import)."""
    return {
        "ok": True,
        "dry_run": False,
        "imported_memories": memories[0],
        "skipped_memories": memories[1],
        "imported_episodes": episodes[0],
        "skipped_episodes": episodes[1],
        "profile_updated": True,
        **more,
    }
