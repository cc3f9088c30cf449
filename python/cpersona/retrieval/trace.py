"""What a recall tells about itself as it runs: the `Trace` the pipeline calls at each stage
(a no-op unless a caller asks), and `trace=true`'s collector (issue 32 item 4; CPersona 2.6's
recall trace): what each stage of one recall kept, dropped and reordered, and why, so a user
can see why a row came back.

The pipeline tells a trace `(stage, rows, detail)`: "supersession" (the declared replacements
the list step applied; detail only), "channels" (the lists as fusion receives them, after the
list steps; the cascade's keyword list in a second call), "fusion" (the fused or cascaded rows;
detail: the mode), "scoring" (after scoring), "admission" (the rows the gate and its rescue
kept; detail: the gate's inputs), "autocut" (what autocut kept) and "gate" (the answer's rows;
detail: the limit). The collector records references, ranks and scores, never stored text,
and is returned in the answer, not stored. A recall that did not ask does what it did before.

Shape (`trace_version` 1, 2.6's key names where 2.6 has the stage): `arms` (per retriever,
its ranked refs with `rank` and `raw` score, as fusion received them), `supersession` (rows a
declared successor replaced: `{ref, by, role}`; rows kept beside a contradicting partner),
`fusion` (the fused order with each row's fused score), `scoring` (`episode_penalty`: factor
per ref; `reordered`: whether scoring changed the order), `gate` (its inputs, and per row the
signal, score and whether it passed), `autocut` (fired, kept, dropped), `order` (the order
before the cut, the limit, the refs the cut left out, the rows returned), `timing_ms`.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from cpersona.retrieval.candidates import Candidate
from cpersona.retrieval.channel import RankedList
from cpersona.retrieval.scoring import signal_of

TRACE_VERSION = 1

#: 2.6's names of the arms, by the name of the list (other lists keep their own).
ARM_NAMES = {"near": "vector", "far": "vector_far", "episodes": "episode_fts"}

Rows = Sequence[Candidate] | Sequence[RankedList]
Ref = tuple[str, int]


class Trace(Protocol):
    """Told each stage's rows as they leave it (a no-op unless a caller asks for a trace);
    `detail`: what the stage decided besides its rows, as JSON values."""

    def __call__(self, stage: str, rows: Rows, detail: Mapping[str, Any] | None = None) -> None: ...


def no_trace(stage: str, rows: Rows, detail: Mapping[str, Any] | None = None) -> None:
    return None


def ref_of(row: Candidate) -> str:
    return "profile" if row.is_profile else f"{row.kind}:{row.id}"


def _num(value: float | None) -> float | None:
    return None if value is None else float(value)


def _candidates(rows: Rows) -> list[Candidate]:
    return [r for r in rows if isinstance(r, Candidate)]


def supersession_detail(
    replaced: Mapping[Ref, tuple[Ref, ...]],
    roles: Mapping[Ref, str],
    contradicting: Mapping[Ref, tuple[Ref, ...]],
) -> dict[str, Any]:
    """The declared replacements a recall applied (the older ref, the refs put at its rank,
    the role), and the contradicting partners kept together: the "supersession" detail."""
    return {
        "replaced": [
            {"ref": f"{k}:{i}", "by": [f"{a}:{b}" for a, b in ends], "role": roles[(k, i)]}
            for (k, i), ends in sorted(replaced.items())
        ],
        "contradicting": [
            {"ref": f"{k}:{i}", "with": [f"{a}:{b}" for a, b in others]}
            for (k, i), others in sorted(contradicting.items())
            if others
        ],
    }


class RecallTrace:
    """One recall's trace: a `Trace` that keeps what each stage told it. A stage may be told
    in any order, or not at all (an empty recall stops before scoring)."""

    def __init__(self) -> None:
        self._t0 = time.perf_counter()
        self.data: dict[str, Any] = {
            "trace_version": TRACE_VERSION,
            "arms": {},
            "supersession": {"replaced": [], "contradicting": []},
            "fusion": [],
            "scoring": {},
            "gate": {"decisions": []},
            "autocut": {"fired": False},
            "order": {},
        }
        #: The rows each stage left, and the cosines fusion left (scoring changes them).
        self._fused: list[Candidate] = []
        self._cosines: list[float | None] = []
        self._scored: list[Candidate] = []
        self._admitted: list[Candidate] = []
        self._cut_from: list[Candidate] = []

    def __call__(self, stage: str, rows: Rows, detail: Mapping[str, Any] | None = None) -> None:
        detail = detail or {}
        if stage == "channels":
            self._arms([r for r in rows if isinstance(r, RankedList)])
        elif stage == "supersession":
            self.data["supersession"] = dict(detail)
        elif stage == "fusion":
            self._fusion(_candidates(rows), str(detail.get("mode", "")))
        elif stage == "scoring":
            self._scoring(_candidates(rows))
        elif stage == "admission":
            self._gate(_candidates(rows), detail)
        elif stage == "autocut":
            self._autocut(_candidates(rows))
        elif stage == "gate":
            self._order(_candidates(rows), int(detail.get("limit", len(rows))))

    # -- retrieval ----------------------------------------------------------------------------

    def _arms(self, lists: Sequence[RankedList]) -> None:
        """Each retriever's ranked list as fusion receives it: ref, rank and the arm's raw
        score (2.6's keys): bm25 for a full-text hit, else the cosine."""
        for lst in lists:
            self.data["arms"][ARM_NAMES.get(lst.name, lst.name)] = [
                {
                    "ref": ref_of(r),
                    "rank": i,
                    "raw": _num(r.bm25 if r.bm25 is not None else r.cosine),
                }
                for i, r in enumerate(lst.rows)
            ]

    def _fusion(self, rows: list[Candidate], mode: str) -> None:
        self._fused, self._cosines = rows, [r.cosine for r in rows]
        self.data["fusion"] = [
            {"ref": ref_of(r), "score": _num(getattr(r, mode, None))}
            for r in rows
            if not r.is_profile
        ]
        self.data["fusion_mode"] = mode

    # -- scoring and admission ----------------------------------------------------------------

    def _scoring(self, after: list[Candidate]) -> None:
        """The episode penalty (each ref's factor, from its cosine before and after) and
        whether scoring reordered the fused list."""
        self._scored = after
        penalty = {}
        for row, was in zip(self._fused, self._cosines, strict=True):
            if was and row.cosine is not None and row.cosine != was:
                penalty[ref_of(row)] = round(row.cosine / was, 6)
        if penalty:
            self.data["scoring"]["episode_penalty"] = penalty
        confidence = {ref_of(r): r.confidence for r in after if r.confidence is not None}
        if confidence:
            self.data["scoring"]["confidence"] = confidence
        self.data["scoring"]["reordered"] = [ref_of(r) for r in self._fused] != [
            ref_of(r) for r in after
        ]

    def _gate(self, kept: list[Candidate], inputs: Mapping[str, Any]) -> None:
        """Per scored row, its gate signal and score and whether the gate (or its rescue)
        kept it; `inputs`: pool, deep, fused_gate, fallback."""
        self._admitted = self._cut_from = kept
        passed = {id(r) for r in kept}
        self.data["gate"].update(inputs)
        self.data["gate"]["decisions"] = [
            {
                "ref": ref_of(r),
                "signal": signal_of(r),
                "score": _num(getattr(r, signal_of(r) or "rrf", None)),
                "passed": id(r) in passed,
            }
            for r in self._scored
        ]

    def _autocut(self, after: list[Candidate]) -> None:
        self._cut_from = after
        kept = {id(r) for r in after}
        dropped = [ref_of(r) for r in self._admitted if id(r) not in kept]
        self.data["autocut"] = {"fired": bool(dropped), "kept": len(after), "dropped": dropped}

    def _order(self, returned: list[Candidate], limit: int) -> None:
        """The order before the cut, the limit, the refs the cut left out, and the rows
        returned (a fused answer places its episode rows after its memories)."""
        kept = {id(r) for r in returned}
        self.data["order"] = {
            "before_cut": [ref_of(r) for r in self._cut_from],
            "limit": limit,
            "cut_by_count": [ref_of(r) for r in self._cut_from if id(r) not in kept],
            "returned": [ref_of(r) for r in returned],
        }

    def finish(self) -> dict[str, Any]:
        self.data["timing_ms"] = {"total": round((time.perf_counter() - self._t0) * 1000, 3)}
        return self.data
