"""Plain-Python references for the kernel tests: float64 dot products and the spec's orders."""

from __future__ import annotations

import struct
from dataclasses import dataclass
from fractions import Fraction

import numpy as np


def total_key(score: float) -> int:
    """The integer that orders float32 values as Rust's ``f32::total_cmp`` does."""
    (bits,) = struct.unpack("<i", struct.pack("<f", score))
    return bits ^ 0x7FFFFFFF if bits < 0 else bits


def ranked(scores: list[float], positions: list[int], k: int) -> list[tuple[int, float]]:
    """The best k (position, score) pairs by (score desc in total order, position asc)."""
    pairs = sorted(zip(positions, scores, strict=True), key=lambda p: (-total_key(p[1]), p[0]))
    return pairs[:k]


def dot64(rows: np.ndarray, query: np.ndarray) -> np.ndarray:
    """float64 dot products of float32 inputs: exact for small-integer vectors."""
    return rows.astype(np.float64) @ query.astype(np.float64)


@dataclass
class SlotSpec:
    """One slot as the oracle and the writer see it."""

    id: int
    key: int
    agent: int
    project: int
    channel: int
    source: int
    vector: np.ndarray
    deleted: bool = False
    foreign: bool = False

    @property
    def scope(self) -> dict[str, int]:
        """The slot's scope hashes, by the names `VectorFileWriter.append` takes them."""
        return {"agent": self.agent, "project": self.project, "channel": self.channel,
                "source": self.source}  # fmt: skip


@dataclass(frozen=True)
class ScanSpec:
    """One scan's arguments; an empty filter (projects, channels, sources) admits any value."""

    agent: int
    projects: tuple[int, ...] = ()
    channels: tuple[int, ...] = ()
    sources: tuple[int, ...] = ()
    window: int = 10
    reach: int = 0
    threshold: float = -1e30
    k: int = 10
    far_k: int = 10


def scan_oracle(
    slots: list[SlotSpec], query: np.ndarray, spec: ScanSpec
) -> tuple[list[int], list[float], list[int], list[float]]:
    """The scan of docs/vector-index.md read literally, scoring in float64."""
    newest_first = sorted(slots, key=lambda s: (s.key, s.id), reverse=True)
    visible = [
        s
        for s in newest_first
        if not s.deleted
        and s.agent == spec.agent
        and (not spec.projects or s.project in spec.projects)
        and (not spec.channels or s.channel in spec.channels)
        and (not spec.sources or s.source in spec.sources)
    ]

    def pick(lo: int, hi: int, k: int) -> tuple[list[int], list[float]]:
        hits = []
        for pos in range(lo, min(hi, len(visible))):
            s = visible[pos]
            if s.foreign:
                continue
            score = float(s.vector.astype(np.float64) @ query.astype(np.float64))
            if score >= spec.threshold:
                hits.append((-score, pos, s.id, score))
        hits.sort()
        return [h[2] for h in hits[:k]], [h[3] for h in hits[:k]]

    near = pick(0, spec.window, spec.k)
    far = pick(spec.window, spec.reach, spec.far_k) if spec.reach > spec.window else ([], [])
    return near[0], near[1], far[0], far[1]


def rrf_exact(rankings: list[list[int]], k: int, weights: list[int] | None = None):
    """Exact rrf scores (Fractions) and first-insertion order."""
    order: list[int] = []
    score: dict[int, Fraction] = {}
    for i, ranking in enumerate(rankings):
        w = 1 if weights is None else weights[i]
        for rank, key in enumerate(ranking):
            if key < 0:
                continue
            if key not in score:
                order.append(key)
                score[key] = Fraction(0)
            score[key] += Fraction(w, k + rank + 1)
    return order, score
