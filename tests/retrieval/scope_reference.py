"""The reference of recall's scope (issue 31): which stored rows a recall's `Scope` admits,
written once in plain Python from retrieval.md §4.0 and the time-range rules (issue 22).

Every channel and every backend of it renders the scope its own way (SQL, the index files'
hashes, hydration); tests/retrieval/test_recall_scope_channels.py holds each of them to this.
A new recall filter is one field of `Scope`, one line in each backend, and one line here.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from cpersona.storage import Store
from cpersona.storage.scan_request import Scope
from cpersona.timerange import row_time


@dataclass(frozen=True, slots=True)
class StoredRow:
    """What the scope reads of a row: its identity and its place on each axis."""

    kind: str  # "mem" | "ep"
    id: int
    agent_id: str
    project_id: str
    channel: str
    #: A memory's `source.id` when it is a string (episodes have no source).
    source_id: str | None
    #: The row's instant key (timerange.row_time): its stamp, else its created_at.
    instant: int


def admits(scope: Scope, row: StoredRow) -> bool:
    """Whether a recall with `scope` may return `row`."""
    if row.agent_id != scope.agent_id:
        return False
    project = scope.project.value  # None: every project; '': the global pool; X: X or global
    if project is not None and row.project_id not in {project, ""}:
        return False
    if scope.channel and row.channel not in {scope.channel, ""}:
        return False
    if scope.source_prefix:
        if row.kind == "ep":
            # Episodes have no source: a source filter admits them only within a channel.
            if not scope.channel:
                return False
        elif row.source_id is None or not row.source_id.startswith(scope.source_prefix):
            return False
    return scope.span is None or scope.span.admits(row.instant)


def _source_id(text: Any) -> str | None:
    try:
        source = json.loads(text) if text else None
    except ValueError:
        return None
    value = source.get("id") if isinstance(source, dict) else None
    return value if isinstance(value, str) else None


def stored_rows(db: Store) -> list[StoredRow]:
    """Every memory and episode of `db` as the reference reads them."""
    mems = db.query(
        "SELECT id, agent_id, project_id, channel, source, timestamp, created_at FROM memories"
    )
    eps = db.query("SELECT id, agent_id, project_id, channel, start_time, created_at FROM episodes")
    out = [
        StoredRow("mem", r[0], r[1], r[2], r[3], _source_id(r[4]), row_time(r[5], r[6]))
        for r in mems
    ]
    out += [StoredRow("ep", r[0], r[1], r[2], r[3], None, row_time(r[4], r[5])) for r in eps]
    return out
