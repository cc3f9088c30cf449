"""Recorded answers (issue 31): a fixed corpus recalled through a real MCP client with every
mode, window, reach, time range and scope, each answer compared field by field with the one
recorded from main's pipeline before recall was rebuilt as a line of channels.

Each configuration is an engine over the same database (mode x window/reach x the arms'
backends: the index files or FTS5 on SQLite, the vector index file or pgvector on
PostgreSQL); each engine answers every time range crossed with every scope, two queries a
cell, rotated over the query list so that every query meets every configuration. Recorded per
kernel and store (the kernels may differ in a float's last bit, and ids are the store's).

What is compared: the tool's whole answer, and for each row the pipeline's candidate (kind,
id, cosine, bm25, rrf, rsf, confidence, backfilled): the fused scores do not all reach the
message. The clock of §6.4 is pinned (`_FIXED_NOW`), so that ages, and the recall-count
bookkeeping the calls make in order, answer the same on every run.

To record anew (only when an answer is meant to change, saying why in the commit):
`CPERSONA_RECORD_ANSWERS=1 python -m pytest tests/retrieval/test_recall_recorded.py`.
"""

from __future__ import annotations

import json
import os
import random
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from cpersona.retrieval import pipeline, scoring
from support.mcp_client import in_memory

pytestmark = pytest.mark.anyio

RECORDING = Path(__file__).parent / "recorded" / "answers.json"
_FIXED_NOW = datetime(2026, 1, 1, tzinfo=UTC)

_TOPICS = [
    "kubernetes rollout strategy",
    "quarterly security digest",
    "database migration plan",
    "vacation booking in kyoto",
    "CVE-2024-3094 remediation",
    "lunch menu rotation",
    "incident drill report",
    "東京の会議の議事録",
    "大阪出張の予定",
    "backup validation checklist",
]
_DETAILS = ["draft", "final", "notes", "review", "summary", "follow-up", "v2", "ab"]
QUERIES = [
    "",
    "kubernetes rollout strategy",
    "rollouts strategies kubernetes-cluster",
    "CVE-2024-3094",
    "東京の会議",
    "ab",
]
#: (since, until): none, a closed range in the past, an open one.
SPANS: list[dict[str, str]] = [
    {},
    {"since": "2024-01-01", "until": "2024-07-01"},
    {"since": "2025-01-01"},
]
#: The scopes a recall can name (agent, project, channel, source prefix) and exclusions.
SCOPES: list[dict[str, Any]] = [
    {},
    {"project_id": "p1"},
    {"channel": "c1"},
    {"source_id": "discord:"},
    {"project_id": "", "channel": "c2", "exclude_contents": ["incident drill report notes 6"]},
    {"agent_id": "bob"},
]
#: (max_memories, vector_reach): the whole table, a small window, a window with a far region.
WINDOWS = [(10000, 0), (12, 0), (12, 40)]
MODES = ["rrf", "rsf", "cascade"]


def _corpus(rng: random.Random) -> list[dict[str, Any]]:
    rows = []
    for i in range(72):
        topic = _TOPICS[i % len(_TOPICS)]
        detail = rng.choice(_DETAILS)
        year = 2023 + (i % 3)
        stamp = f"{year}-{1 + i % 12:02d}-{1 + (i * 7) % 27:02d}T{i % 24:02d}:15:00+00:00"
        message: dict[str, Any] = {"content": f"{topic} {detail} {i}", "timestamp": stamp}
        if i % 4 == 0:
            message["source"] = {"type": "User", "id": f"discord:{100 + i % 5}", "name": "u"}
        elif i % 4 == 1:
            message["source"] = {"type": "User", "id": f"slack:{i % 3}", "name": "v"}
        rows.append(
            {
                "agent": "bob" if i % 9 == 8 else "alice",
                "project_id": ["", "p1", "p2"][i % 3],
                "channel": ["", "c1", "c2", ""][i % 4],
                "message": message,
            }
        )
    return rows


def _episodes() -> list[dict[str, Any]]:
    out = []
    for i in range(8):
        out.append(
            {
                "agent_id": "bob" if i == 7 else "alice",
                "summary": f"{_TOPICS[(i * 3) % len(_TOPICS)]} episode {i}",
                "project_id": ["", "p1"][i % 2],
                "channel": ["", "c1", "c2"][i % 3],
                "history": [{"timestamp": f"202{3 + i % 3}-0{1 + i}-10T08:00:00Z", "content": "x"}],
                "resolved": i % 3 == 0,
            }
        )
    return out


def _configs(store_backend: str) -> list[dict[str, Any]]:
    index_knob = "fts_index" if store_backend == "sqlite" else "pg_vector_index"
    return [
        {"recall_mode": mode, "max_memories": w, "vector_reach": r, index_knob: flag}
        for mode in MODES
        for w, r in WINDOWS
        for flag in (True, False)
    ]


def _candidate(row: Any) -> list[Any]:
    return [
        row.kind,
        row.id,
        row.cosine,
        row.bm25,
        row.rrf,
        row.rsf,
        row.confidence,
        row.backfilled,
    ]


@pytest.fixture
def captured(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The pipeline's results, in call order, and the §6.4 clock pinned."""
    results: list[Any] = []
    original = pipeline.Recaller.recall
    confidence = scoring.confidence
    span = scoring.scope_span

    def recall(self: Any, req: Any) -> Any:
        result = original(self, req)
        results.append(result)
        return result

    monkeypatch.setattr(pipeline.Recaller, "recall", recall)
    monkeypatch.setattr(
        scoring,
        "confidence",
        lambda row, sp, hist, deep, now, s: confidence(row, sp, hist, deep, _FIXED_NOW, s),
    )
    monkeypatch.setattr(scoring, "scope_span", lambda lo, hi, now: span(lo, hi, _FIXED_NOW))
    return results


async def _answers(make_engine: Any, store_backend: str, results: list[Any]) -> dict[str, Any]:
    fixed = {"calibrate_on_model_change": False, "auto_calibrate": False}
    async with in_memory(make_engine(**fixed)) as t:
        for row in _corpus(random.Random(31)):
            extra = {k: row[k] for k in ("project_id", "channel") if row[k]}
            await t.store(row["message"].pop("content"), row["agent"], **row["message"], **extra)
        for episode in _episodes():
            await t("archive_episode", episode)
    answers: dict[str, Any] = {}
    for n, config in enumerate(_configs(store_backend)):
        async with in_memory(make_engine(**fixed, **config)) as t:
            for i, since_until in enumerate(SPANS):
                for j, scope in enumerate(SCOPES):
                    for q in range(2):
                        query = QUERIES[(n + 2 * (i * len(SCOPES) + j) + q) % len(QUERIES)]
                        args = {"agent_id": "alice", "query": query, **scope, **since_until}
                        args["deep"] = (i + j + q) % 2 == 1
                        key = json.dumps({**config, **args}, sort_keys=True, ensure_ascii=False)
                        before = len(results)
                        answer = await t("recall", args)
                        rows = results[-1].rows if len(results) > before else []
                        answers[key] = {"answer": answer, "rows": [_candidate(r) for r in rows]}
    return answers


def _dumped(recorded: dict[str, dict[str, Any]]) -> str:
    """The recording as JSON with one line per call (a diff names the calls that changed)."""

    def line(value: Any) -> str:
        return json.dumps(value, sort_keys=True, ensure_ascii=False)

    pairs = [
        line(name) + ": {\n" + ",\n".join(f"{line(k)}: {line(v[k])}" for k in sorted(v)) + "\n}"
        for name, v in sorted(recorded.items())
    ]
    return "{\n" + ",\n".join(pairs) + "\n}\n"


async def test_answers_equal_the_recorded_ones(
    make_engine, store_backend, kernel, captured
) -> None:
    got = await _answers(make_engine, store_backend, captured)
    assert len(got) >= 300
    assert any(a["rows"] for a in got.values())  # the corpus is found, not only empty answers
    name = f"{kernel}-{store_backend}"
    recorded: dict[str, Any] = json.loads(RECORDING.read_text()) if RECORDING.exists() else {}
    if os.environ.get("CPERSONA_RECORD_ANSWERS") == "1":
        recorded[name] = got
        RECORDING.parent.mkdir(exist_ok=True)
        RECORDING.write_text(_dumped(recorded))
        return
    assert name in recorded, f"no recording for {name}: record with CPERSONA_RECORD_ANSWERS=1"
    want = recorded[name]
    assert sorted(got) == sorted(want)
    for key in want:
        # One call at a time, so that a failure names the call and the field that differ.
        assert got[key]["rows"] == want[key]["rows"], key
        assert got[key]["answer"] == want[key]["answer"], key
