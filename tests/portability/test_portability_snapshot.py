"""An export reads one snapshot (issue 18): a memory stored between the header's counts and the
body is in neither, so the header counts what the file holds."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cpersona.engine import Engine
from cpersona.storage import bulk as portability_sql
from portability_support import read_jsonl

pytestmark = pytest.mark.anyio


async def test_a_store_between_the_counts_and_the_body_of_an_export_is_in_neither(
    store_backend: str,
    connect: Callable[..., Any],
    make_engine: Callable[..., Engine],
    export_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with connect() as tools:
        for i in range(3):
            out = await tools("store", {"agent_id": "alice", "message": {"content": f"note {i}"}})
            assert out["result"] == "stored", out
        other = make_engine()
        count_rows = portability_sql.Rows.count_rows
        stored: list[dict[str, Any]] = []

        def counted_then_written(self: Any, agent_id: str | None) -> Any:
            counts = count_rows(self, agent_id)  # the header's counts: the export's first read
            writer = threading.Thread(
                target=lambda: stored.append(
                    other.writer.store("alice", {"content": "stored mid-export"}, "", "")
                )
            )
            writer.start()
            writer.join(30)
            return counts

        monkeypatch.setattr(portability_sql.Rows, "count_rows", counted_then_written)
        out = await tools("export_memories", {"agent_id": "alice", "output_path": "mid.jsonl"})
        assert out["ok"] is True, out
    assert [s["result"] for s in stored] == ["stored"]
    records = read_jsonl(export_dir / "mid.jsonl")
    body = [r["content"] for r in records if r["_type"] == "memory"]
    assert records[0]["memory_count"] == len(body) == 3
    assert "stored mid-export" not in body
