"""`trace=true` on recall (issue 32 item 4; CPersona 2.6's recall trace): what each stage of
one recall kept, dropped and reordered, and why, so a user can see why a row came back.

The collector lives in a context variable for the length of one traced recall; the pipeline
feeds it at a few marked points (`issue 32 hook` in retrieval/pipeline.py) with the rows it
has anyway. Outside a traced recall `current()` is None and every hook is one comparison: a
recall that did not ask for a trace does what it did before. The record carries references,
ranks and scores, never stored text, and is returned in the answer, not stored.

Shape (`trace_version` 1, 2.6's key names where 2.6 has the stage): `arms` (per retriever,
its ranked refs with `rank` and `raw` score, as fusion received them), `supersession` (rows a
declared successor replaced: `{ref, by, role}`; rows kept beside a contradicting partner),
`fusion` (the fused order with each row's fused score), `scoring` (`episode_penalty`: factor
per ref; `reordered`: whether scoring changed the order), `gate` (its inputs, and per row the
signal, score and whether it passed), `autocut` (fired, kept, dropped), `order` (the final
order, the limit, the refs the limit cut), `timing_ms`.
"""

from __future__ import annotations

import contextlib
import contextvars
import time
from collections.abc import Iterator, Sequence
from typing import Any

from cpersona.retrieval.candidates import Candidate
from cpersona.retrieval.scoring import signal_of

TRACE_VERSION = 1

_current: contextvars.ContextVar[RecallTrace | None] = contextvars.ContextVar(
    "cpersona_recall_trace", default=None
)


def current() -> RecallTrace | None:
    """The collector of the traced recall in progress, or None."""
    return _current.get()


def ref_of(row: Candidate) -> str:
    return "profile" if row.is_profile else f"{row.kind}:{row.id}"


def _num(value: float | None) -> float | None:
    return None if value is None else float(value)


class RecallTrace:
    """One recall's trace. Every method may be called in any order, or not at all."""

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

    @contextlib.contextmanager
    def active(self) -> Iterator[RecallTrace]:
        token = _current.set(self)
        try:
            yield self
        finally:
            _current.reset(token)

    # -- retrieval ----------------------------------------------------------------------------

    def arms(self, lists: dict[str, Sequence[Candidate]]) -> None:
        """Each retriever's ranked list as fusion receives it: ref, rank and the arm's raw
        score (2.6's keys): bm25 for a full-text hit, else the cosine."""
        for name, rows in lists.items():
            self.data["arms"][name] = [
                {
                    "ref": ref_of(r),
                    "rank": i,
                    "raw": _num(r.bm25 if r.bm25 is not None else r.cosine),
                }
                for i, r in enumerate(rows)
            ]

    def supersession(
        self,
        replaced: dict[tuple[str, int], tuple[tuple[str, int], ...]],
        roles: dict[tuple[str, int], str],
        contradicting: dict[tuple[str, int], tuple[tuple[str, int], ...]],
    ) -> None:
        """The declared replacements this recall applied in every arm (the older ref, the
        refs put at its rank, the role), and the contradicting partners kept together."""
        self.data["supersession"] = {
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

    def fusion(self, rows: Sequence[Candidate], mode: str) -> None:
        self.data["fusion"] = [
            {"ref": ref_of(r), "score": _num(getattr(r, mode, None))}
            for r in rows
            if not r.is_profile
        ]
        self.data["fusion_mode"] = mode

    # -- scoring and admission ----------------------------------------------------------------

    def scoring(
        self,
        before: Sequence[Candidate],
        cosines: Sequence[float | None],
        after: Sequence[Candidate],
    ) -> None:
        """The episode penalty (each ref's factor, from its cosine before and after) and
        whether scoring reordered the fused list."""
        penalty = {}
        for row, was in zip(before, cosines, strict=True):
            if was and row.cosine is not None and row.cosine != was:
                penalty[ref_of(row)] = round(row.cosine / was, 6)
        if penalty:
            self.data["scoring"]["episode_penalty"] = penalty
        confidence = {ref_of(r): r.confidence for r in after if r.confidence is not None}
        if confidence:
            self.data["scoring"]["confidence"] = confidence
        self.data["scoring"]["reordered"] = [ref_of(r) for r in before] != [
            ref_of(r) for r in after
        ]

    def gate(
        self,
        rows: Sequence[Candidate],
        kept: Sequence[Candidate],
        *,
        pool: int,
        deep: bool,
        fused_gate: tuple[float | None, str | None],
        fallback: bool,
    ) -> None:
        passed = {id(r) for r in kept}
        self.data["gate"].update(
            {
                "pool": pool,
                "deep": deep,
                "fused_gate": {"value": fused_gate[0], "signal": fused_gate[1]},
                "fallback": fallback,
            }
        )
        self.data["gate"]["decisions"] = [
            {
                "ref": ref_of(r),
                "signal": signal_of(r),
                "score": _num(getattr(r, signal_of(r) or "rrf", None)),
                "passed": id(r) in passed,
            }
            for r in rows
        ]

    def autocut(self, before: Sequence[Candidate], after: Sequence[Candidate]) -> None:
        kept = {id(r) for r in after}
        dropped = [ref_of(r) for r in before if id(r) not in kept]
        self.data["autocut"] = {"fired": bool(dropped), "kept": len(after), "dropped": dropped}

    def order(self, rows: Sequence[Candidate], limit: int) -> None:
        self.data["order"] = {
            "before_cut": [ref_of(r) for r in rows],
            "limit": limit,
            "cut_by_count": [ref_of(r) for r in rows[limit:]],
        }

    def finish(self) -> dict[str, Any]:
        self.data["timing_ms"] = {"total": round((time.perf_counter() - self._t0) * 1000, 3)}
        return self.data
