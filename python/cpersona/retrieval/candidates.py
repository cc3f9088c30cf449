"""The candidate rows the pipeline ranks, and the retrievers that produce them (§4).

A candidate's identity is (kind, id); its fusion key is 2*id for memories and 2*id+1 for
episodes, so both id spaces share one int64 key space in the kernels.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from cpersona.storage.search import EpisodeHit, MemoryHit

PROFILE_ID = -1


@dataclass
class Candidate:
    """One row on its way through fusion, scoring and the gate (mutable by design)."""

    kind: str  # "mem" | "ep" | "profile"
    id: int
    content: str
    source: Any  # parsed JSON, or None when the row has no source text
    timestamp: str
    msg_id: str = ""
    resolved: bool = False
    cosine: float | None = None
    backfilled: bool = False
    bm25: float | None = None
    rrf: float | None = None
    rsf: float | None = None
    confidence: float | None = None
    confidence_detail: dict[str, Any] | None = field(default=None)
    #: The episode-boundary factor applied to this row's scores (§6.2; 1.0: none). The gate
    #: divides it back out: it judges how well a row matches, the penalty only its rank.
    penalty: float = 1.0

    @property
    def key(self) -> int:
        return 2 * self.id + (1 if self.kind == "ep" else 0)

    @property
    def is_profile(self) -> bool:
        return self.kind == "profile"


def from_memory(hit: MemoryHit) -> Candidate:
    # A stored source text (the default is "{}") always yields a `source` in the message,
    # `{}` included; only an empty / NULL column yields none (retrieval.md §3.2).
    source: Any = None
    if hit.source:
        try:
            source = json.loads(hit.source)
        except ValueError:
            source = {}
    return Candidate(
        kind="mem",
        id=hit.id,
        content=hit.content,
        source=source,
        timestamp=hit.timestamp or "",
        msg_id=hit.msg_id,
        bm25=hit.bm25,
    )


def from_episode(hit: EpisodeHit) -> Candidate:
    return Candidate(
        kind="ep",
        id=hit.id,
        content="[Episode] " + hit.summary,
        source={"System": "episode"},
        timestamp=hit.start_time or hit.created_at or "",
        resolved=hit.resolved,
        bm25=hit.bm25,
    )


def profile_row(text: str) -> Candidate:
    return Candidate(
        kind="profile",
        id=PROFILE_ID,
        content="[Profile] " + text,
        source={"System": "profile"},
        timestamp="",
    )


def dedupe(rows: list[Candidate]) -> list[Candidate]:
    """First row per identity wins (vector rows come first and carry the cosine)."""
    seen: set[tuple[str, int]] = set()
    out = []
    for row in rows:
        ident = (row.kind, row.id)
        if ident not in seen:
            seen.add(ident)
            out.append(row)
    return out


def merged_vector_list(
    mem: list[tuple[int, float]], ep: list[tuple[int, float]], limit: int
) -> list[tuple[str, int, float]]:
    """Memories then episodes, top `limit` by score with a stable selection (§4.2 step 2)."""
    joined = [("mem", i, s) for i, s in mem] + [("ep", i, s) for i, s in ep]
    order = np.argsort(-np.array([s for _, _, s in joined], dtype=np.float64), kind="stable")
    return [joined[int(i)] for i in order[:limit]]
