"""scoring.place_episodes and episode_allowance against a plain-Python oracle (hypothesis)."""

from __future__ import annotations

from cpersona.retrieval import scoring
from cpersona.retrieval.candidates import Candidate, profile_row
from hypothesis import given
from hypothesis import strategies as st


def _row(kind: str, i: int) -> Candidate:
    return Candidate(kind=kind, id=i + 1, content=f"{kind} {i}", source=None, timestamp="")


@st.composite
def fused_lists(draw: st.DrawFn) -> list[Candidate]:
    kinds = draw(st.lists(st.sampled_from(["mem", "ep"]), max_size=30))
    rows = [_row(k, i) for i, k in enumerate(kinds)]
    if draw(st.booleans()):
        rows.append(profile_row("likes tea"))  # fusion appends the profile last
    return rows


def oracle(rows: list[Candidate], limit: int, allowance: int) -> list[Candidate]:
    """Drop the episodes past the allowance, cut to limit, then memories, episodes, profile."""
    kept, seen = [], 0
    for row in rows:
        if row.kind == "ep":
            seen += 1
            if seen > allowance:
                continue
        kept.append(row)
    head = kept[:limit]
    return (
        [r for r in head if r.kind == "mem"]
        + [r for r in head if r.kind == "ep"]
        + [r for r in head if r.is_profile]
    )


@given(fused_lists(), st.integers(0, 40), st.integers(0, 5))
def test_placement_matches_the_oracle(rows, limit, allowance):
    out = scoring.place_episodes(rows, limit, allowance)
    assert out == oracle(rows, limit, allowance)
    assert sum(r.kind == "ep" for r in out) <= allowance
    assert len(out) == min(limit, len(oracle(rows, 10**6, allowance)))


@given(st.integers(0, 500), st.integers(-1, 20))
def test_allowance(limit, setting):
    got = scoring.episode_allowance(limit, setting)
    if setting >= 0:
        assert got == setting
    else:
        assert got == max(1, (limit + 9) // 10)
