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
