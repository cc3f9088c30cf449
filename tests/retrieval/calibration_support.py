"""The calibration tests' corpus and their independent oracle (retrieval.md §15.3).

Shared by test_calibration.py (the tools), test_calibration_sidecar.py (the sidecar file and
start-up) and test_calibration_in_database.py (the sidecar kept in the database). The hashing
embedder is deterministic, so every threshold is recomputed here with plain numpy.
"""

from __future__ import annotations

import itertools
from datetime import UTC, datetime
from typing import Any

import numpy as np
from cpersona.embedding.hashing import HashingProvider
from support.mcp_client import Tools

TOPICS = {
    "garden": ["tomato", "basil", "compost", "seedlings", "watering", "trellis"],
    "kitchen": ["sourdough", "starter", "oven", "flour", "proofing", "crust"],
    "travel": ["passport", "flight", "luggage", "hotel", "itinerary", "visa"],
    "music": ["guitar", "chords", "metronome", "scales", "strings", "tuning"],
    "cycling": ["saddle", "chain", "gears", "helmet", "tyres", "cadence"],
    "finance": ["budget", "invoice", "savings", "taxes", "receipts", "pension"],
}


def corpus() -> list[tuple[str, str]]:
    """(content, timestamp): three days; each day's twelve rows (two per topic) span 22 minutes.

    So temporal positives mix topics and same-topic rows on other days are nulls: the null
    and positive score distributions overlap, which is what makes beta matter.
    """
    rows = []
    for ti, (topic, words) in enumerate(TOPICS.items()):
        for wi, word in enumerate(words):
            stamp = f"2024-03-{wi // 2 + 1:02d}T10:{ti * 4 + (wi % 2) * 2:02d}:00Z"
            rows.append((f"{topic} log: {word} and {words[(wi + 1) % 6]} today", stamp))
    return rows


async def fill(
    tools: Tools, agent_id: str = "a", rows: list[tuple[str, str]] | None = None
) -> None:
    for content, stamp in corpus() if rows is None else rows:
        out = await tools(
            "store", {"agent_id": agent_id, "message": {"content": content, "timestamp": stamp}}
        )
        assert out["result"] == "stored", out


# -- the independent oracle -------------------------------------------------------------------


def vectors(rows: list[tuple[str, str]]) -> np.ndarray:
    return HashingProvider().embed([content for content, _ in rows]).astype(np.float64)


def null_scores(v: np.ndarray) -> np.ndarray:
    return (v @ v.T)[np.triu_indices(v.shape[0], k=1)]


def oracle_sep(x: np.ndarray, y: np.ndarray, floor: float, beta: float) -> tuple[float, float]:
    lo, hi = min(x.min(), y.min()), max(x.max(), y.max())
    best = None
    for c in np.linspace(lo, hi, 256):
        tpr, fpr = float(np.mean(y >= c)), float(np.mean(x >= c))
        value = tpr + beta * (1 - fpr)
        if best is None or value > best[0]:
            best = (value, float(c), tpr - fpr)
    assert best is not None
    return max(best[1], floor), best[2]


def temporal(rows: list[tuple[str, str]], v: np.ndarray, window_s: float = 1800) -> np.ndarray:
    order = sorted(range(len(rows)), key=lambda i: datetime.fromisoformat(rows[i][1]))
    out = []
    for i, j in itertools.pairwise(order):
        gap = datetime.fromisoformat(rows[j][1]) - datetime.fromisoformat(rows[i][1])
        if gap.total_seconds() <= window_s:
            a, b = v[i] / np.linalg.norm(v[i]), v[j] / np.linalg.norm(v[j])
            out.append(float(a @ b))
    return np.array(out)


def close(a: float, b: float) -> bool:
    return abs(a - b) <= 1.01e-4  # both sides are round_4 of values equal up to float noise


#: What `back_up_seven_then_v6_again` leaves: one backup a label, the newest five, v6's the later.
NEWEST_FIVE = [
    ("v2", "20240101-000002"),
    ("v3", "20240101-000003"),
    ("v4", "20240101-000004"),
    ("v5", "20240101-000005"),
    ("v6", "20240101-000100"),
]


def back_up_seven_then_v6_again(car: Any) -> str | None:
    """Backups labelled v0 to v6 a second apart, then v6 again a minute on (replacing the
    older v6); returns the last backup's key."""
    for i in range(7):
        car.backup(f"v{i}", datetime(2024, 1, 1, 0, 0, i, tzinfo=UTC))
    return car.backup("v6", datetime(2024, 1, 1, 0, 1, 0, tzinfo=UTC))
