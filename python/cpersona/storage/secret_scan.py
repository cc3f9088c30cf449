"""SQL of the `stored_credentials` health check (issue 22): the stored texts it reads, and the
in-place redaction its repair writes.

Functions take a `health.Handle` (the reader, or the fix run's transaction). A memory's new text
goes through `health.rewrite_content`, the annotation repairs' path: its vector becomes NULL
(the fix run re-embeds it after the commit) and the triggers log the change for both index
files; a row whose redacted text equals another's in its bucket is deleted, as dedup would.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from cpersona.storage.upkeep.handle import Conn
from cpersona.storage.upkeep.texts import rewrite_content

#: (table, column) of every stored text a write screens; memories' metadata is JSON text.
COLUMNS: dict[str, tuple[str, ...]] = {
    "memories": ("content", "metadata"),
    "episodes": ("summary", "keywords"),
    "profiles": ("content",),
}


@dataclass(frozen=True, slots=True)
class StoredText:
    table: str
    id: int
    agent_id: str
    #: column -> text, in COLUMNS order.
    texts: dict[str, str]
    locked: bool


def stored_texts(conn: Conn, agent_id: str, batch: int = 1000) -> Iterator[StoredText]:
    """Every row's screened texts, table by table, by id (`agent_id` "" = every agent)."""
    for table, columns in COLUMNS.items():
        locked = "locked" if table == "memories" else "0"
        scope = " AND agent_id = ?" if agent_id else ""
        last = 0
        while True:
            rows = conn.execute(
                f"SELECT id, agent_id, {locked}, {', '.join(columns)} FROM {table} "
                f"WHERE id > ?{scope} ORDER BY id LIMIT ?",
                [last, *([agent_id] if agent_id else []), batch],
            ).fetchall()
            if not rows:
                break
            for r in rows:
                values = zip(columns, r[3:], strict=True)
                texts = {c: "" if v is None else str(v) for c, v in values}
                yield StoredText(table, int(r[0]), str(r[1]), texts, bool(r[2]))
            last = int(rows[-1][0])


def redact_row(conn: Conn, table: str, row_id: int, texts: dict[str, str]) -> str:
    """Write a row's redacted texts; what happened: `updated`, `deleted` (a memory that now
    duplicates another) or `missing`. Locked memories are left (the SQL says `locked = 0`)."""
    if table == "memories":
        outcome = "updated"
        if "content" in texts:
            outcome = rewrite_content(conn, row_id, texts["content"])
        if "metadata" in texts and outcome == "updated":
            conn.execute(
                "UPDATE memories SET metadata = ? WHERE id = ? AND locked = 0",
                (texts["metadata"], row_id),
            )
        return outcome
    sets = ", ".join(f"{c} = ?" for c in texts)
    if table == "episodes" and "summary" in texts:
        sets += ", embedding = NULL"  # the vector embedded the old summary
    changed = conn.execute(
        f"UPDATE {table} SET {sets} WHERE id = ?", [*texts.values(), row_id]
    ).rowcount
    return "updated" if changed else "missing"
