"""Every confidence weight of retrieval.md §17 changes the score as §6.4 says.

An independent re-implementation of the §6.4 formula (`expected`) predicts each message's
`confidence.score` from what the caller can see (the post-penalty cosine in `match_reason`,
the timestamps it stored, the episode's `resolved` flag) plus the recall history, which the
tests set directly: a recall-count history older than minutes would otherwise need waiting.
For each knob the prediction must hold, and must differ from the default settings' for at
least one row, so a knob that is silently ignored fails.
"""

from __future__ import annotations

import dataclasses
import math
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from cpersona.config import Settings
from cpersona.embedding.hashing import HashingProvider
from cpersona.engine import Engine
from support.mcp_client import AGENT, parse_utc

pytestmark = pytest.mark.anyio

NOW = datetime.now(UTC).replace(microsecond=0)
# Memories 1000-1100 h old: the scope's span R is 100 h (< REFERENCE_HOURS), so their time
# decay sits on the floor; the episodes are young (50-60 h) and decay freely.
MEMORIES = [  # content, hours before NOW (all "+00:00": text order is time order)
    ("alpha ledger note", 1000),
    ("alpha ledger archive copy", 1010),
    ("alpha ledger from the old system", 1100),
    ("beta unrelated", 1050),
]
T_MAX = NOW - timedelta(hours=1000)
T_MIN = NOW - timedelta(hours=1100)
QUERY = "alpha ledger note"


def expected(
    msg: dict, history: tuple[int, datetime | None], deep: bool, now: datetime, s: Settings
) -> float:
    def hours(d: timedelta) -> float:
        return d.total_seconds() / 3600

    span = max(0.0, hours(T_MAX - T_MIN))
    newest_age = max(0.0, hours(now - T_MAX))
    stamp = msg.get("timestamp")
    age = max(0.0, hours(now - parse_utc(stamp))) if stamp else newest_age + span / 2
    count, last = history
    boost = math.log(1 + count) * s.recall_boost
    if boost > 0 and last is not None:
        boost /= 1 + max(0.0, hours(now - last)) * s.boost_decay_rate
    floor = min(s.decay_ceil, s.decay_floor + boost)
    if deep:
        tau = 1.0
    elif span > 0:
        lam = s.decay_rate / max(1.0, max(s.min_time_range_hours, span) / s.reference_hours)
        tau = max(floor, 1 / (1 + age * lam))
    else:
        tau = max(floor, 1 / (1 + age * s.decay_rate))
    kappa = s.resolved_decay_factor if msg.get("resolved") and not deep else 1.0
    recent = last is not None and (now - last).total_seconds() / 60 < s.recent_recall_window_min
    pi = s.recent_recall_penalty if recent and not deep else 1.0
    cosine = msg["match_reason"].get("cosine")
    if cosine is None:
        return math.sqrt(tau) * kappa * pi
    width = s.cosine_ceil - s.cosine_floor
    c_hat = 0.0 if width <= 0 else min(1.0, max(0.0, (cosine - s.cosine_floor) / width))
    return math.sqrt(c_hat * tau) * kappa * pi


def _write_corpus(engine: Engine) -> None:
    w = engine.writer
    for content, hours in MEMORIES:
        stamp = (NOW - timedelta(hours=hours)).isoformat()
        assert w.store(AGENT, {"content": content, "timestamp": stamp}, "", "")["id"]
    for summary, resolved, hours in (
        ("alpha ledger retro", False, 50),
        ("alpha ledger review", True, 60),
    ):
        stamp = (NOW - timedelta(hours=hours)).isoformat()
        assert w.archive_episode(AGENT, summary, [{"timestamp": stamp}], "", resolved, "", "")["ok"]
    for i in range(46):  # a pool of 50 rows and more lets the profile through
        assert w.store(AGENT, {"content": f"pool row {i}", "timestamp": T_MAX.isoformat()}, "", "")[
            "id"
        ]
    assert w.update_profile(AGENT, "keeps the ledger")["ok"]


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The corpus, written once per module; each test recalls from its own copy."""
    path = tmp_path_factory.mktemp("knobs") / "template.db"
    engine = Engine(
        Settings(db_path=str(path), embedding_mode="hashing"), embedder=HashingProvider()
    )
    try:
        _write_corpus(engine)
    finally:
        engine.close()
    return path


@pytest.fixture
def corpus(template: Path, tmp_path: Path, store_backend: str, make_engine: Any) -> None:
    if store_backend == "postgresql":  # the test's own database: written through the tools' writer
        _write_corpus(make_engine())
        return
    src, dst = sqlite3.connect(template), sqlite3.connect(tmp_path / "mem.db")
    try:
        src.backup(dst)
    finally:
        src.close()
        dst.close()


def _set_history(t, count: int, last: datetime | None) -> None:
    stamp = None if last is None else last.strftime("%Y-%m-%d %H:%M:%S")
    with t.engine.db.atomic() as conn:
        conn.execute("UPDATE memories SET recall_count = ?, last_recalled_at = ?", (count, stamp))


KNOBS = [
    {},
    {"cosine_floor": 0.5},
    {"cosine_ceil": 0.95},
    {"decay_rate": 0.05},
    {"decay_floor": 0.6},
    {"decay_ceil": 0.1},
    {"min_time_range_hours": 20_000.0},
    {"reference_hours": 5.0},
    {"resolved_decay_factor": 0.9},
    {"recall_boost": 0.3, "history": (5, 100.0)},
    {"recall_boost": 0.3, "boost_decay_rate": 0.5, "history": (5, 100.0)},
    {"recent_recall_penalty": 0.9, "history": (1, 0.05)},
    {"recent_recall_window_min": 1.0, "history": (1, 0.05)},
    {"history": (1, 0.05)},
    {"history": (40, 2.0)},
]


async def _check(connect, knob: dict, deep: bool) -> None:
    knob = dict(knob)
    count, hours_ago = knob.pop("history", (0, None))
    # No episode penalty: it would halve the old rows' cosines (tested on its own elsewhere).
    settings = {
        "confidence_enabled": True,
        "autocut_enabled": False,
        "episode_penalty_enabled": False,
        **knob,
    }
    async with connect(**settings) as t:
        now = datetime.now(UTC)
        last = (
            None if hours_ago is None else (now - timedelta(hours=hours_ago)).replace(microsecond=0)
        )
        _set_history(t, count, last)
        out = await t.recall(QUERY, deep=deep, limit=100)
        now = datetime.now(UTC)
    messages = out["messages"]
    kinds = {m.get("ref", "profile:")[:3] for m in messages}
    assert {"mem", "pro"} <= kinds, kinds
    if deep:  # half the gate: the resolved episode (x0.3 without deep) is in too
        assert "ep:" in kinds
    s = dataclasses.replace(Settings(), **settings)
    default = dataclasses.replace(
        Settings(), confidence_enabled=True, episode_penalty_enabled=False
    )
    moved = 0
    for m in messages:
        resolved = m["confidence"].get("resolved", False)
        history = (count, last) if m.get("ref", "").startswith("mem:") else (0, None)
        msg = {**m, "resolved": resolved}
        want = expected(msg, history, deep, now, s)
        assert m["confidence"]["score"] == pytest.approx(want, abs=1.5e-4), m["content"]
        if abs(expected(msg, history, deep, now, default) - want) > 1e-3:
            moved += 1
    scores = [m["confidence"]["score"] for m in messages]
    assert scores == sorted(scores)
    if knob and not deep:
        assert moved, "the knob changed no score"


@pytest.mark.parametrize("knob", KNOBS, ids=lambda k: ",".join(k) or "defaults")
async def test_confidence_follows_each_weight(connect, corpus, knob):
    await _check(connect, knob, deep=False)


@pytest.mark.parametrize(
    "knob",
    [
        {},
        {"decay_floor": 0.6},
        {"resolved_decay_factor": 0.9},
        {"recent_recall_penalty": 0.9, "history": (1, 0.05)},
    ],
    ids=lambda k: ",".join(k) or "defaults",
)
async def test_deep_ignores_decay_resolution_and_recent_recall(connect, corpus, knob):
    # deep: tau = 1, no resolved factor, no recent-recall penalty; the oracle knows it.
    await _check(connect, knob, deep=True)
