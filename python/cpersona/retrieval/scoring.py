"""Post-fusion scoring (§6), the quality gate (§7) and autocut (§11). Pure functions."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from cpersona.config import Settings
from cpersona.memory.text import parse_utc

if TYPE_CHECKING:
    from cpersona.retrieval.candidates import Candidate

#: Pool sizes below which the profile row / unscored rows are dropped (contract §7).
PROFILE_POOL_MIN = 50
UNSCORED_POOL_MIN = 100
#: The smallest pool the gate cannot tell from any larger one: m(N) reaches its floor 0.2 at
#: N = 499 and both pool thresholds lie below. Counting past it reads rows for nothing (a
#: full COUNT(*) of a 1,000,000-row agent took 60 ms warm, 100 ms and more cold).
POOL_SATURATION = 499


def _hours(delta_seconds: float) -> float:
    return delta_seconds / 3600.0


def episode_penalty(rows: list[Candidate], boundary: datetime | None, settings: Settings) -> bool:
    """Multiply each memory row's scores by max(FLOOR, exp(-RATE*h)); True if any changed."""
    if boundary is None or not settings.episode_penalty_enabled:
        return False
    changed = False
    for row in rows:
        if row.kind != "mem":
            continue  # episodes are exempt, the profile has no timestamp
        t = parse_utc(row.timestamp)
        if t is None or t >= boundary:
            continue
        h = _hours((boundary - t).total_seconds())
        f = max(settings.episode_decay_floor, math.exp(-settings.episode_decay_rate * h))
        if f < 1.0:
            changed = True
            row.penalty = f
            if row.cosine is not None:
                row.cosine *= f
            if row.rrf is not None:
                row.rrf *= f
            if row.rsf is not None:
                row.rsf *= f
    return changed


def penalty_resort(rows: list[Candidate]) -> list[Candidate]:
    """After a penalty with confidence off: re-sort by rrf, else rsf; cascade keeps its order."""
    scored = [r for r in rows if not r.is_profile]
    for attr in ("rrf", "rsf"):
        if scored and all(getattr(r, attr) is not None for r in scored):
            return sorted(rows, key=lambda r: _desc(r, attr))
    return rows


def _desc(row: Candidate, attr: str) -> float:
    # Sort key for a stable descending sort, with the profile last.
    if row.is_profile:
        return math.inf
    value = getattr(row, attr)
    return -(value if value is not None else -math.inf)


@dataclass(frozen=True, slots=True)
class ScopeSpan:
    """Scope statistics of §6.4: R (hours between oldest and newest stamp), A_new."""

    range_hours: float
    newest_age_hours: float | None


def scope_span(t_min: str | None, t_max: str | None, now: datetime) -> ScopeSpan:
    lo, hi = parse_utc(t_min), parse_utc(t_max)
    if lo is None or hi is None:
        return ScopeSpan(0.0, None)
    r = max(0.0, _hours((hi - lo).total_seconds()))
    return ScopeSpan(r, max(0.0, _hours((now - hi).total_seconds())))


def confidence(
    row: Candidate,
    span: ScopeSpan,
    history: tuple[int, str | None],
    deep: bool,
    now: datetime,
    s: Settings,
) -> tuple[float, dict[str, object]]:
    """The §6.4 score of one row and the `confidence` object emitted with it."""
    t = parse_utc(row.timestamp)
    age_unknown = t is None
    if t is not None:
        age = max(0.0, _hours((now - t).total_seconds()))
    elif span.newest_age_hours is not None:
        age = span.newest_age_hours + span.range_hours / 2
    else:
        age = max(s.min_time_range_hours, span.range_hours) / 2
    count, last = history
    boost = math.log1p(count) * s.recall_boost
    last_t = parse_utc(last) if last else None
    if boost > 0 and last_t is not None:
        since = max(0.0, _hours((now - last_t).total_seconds()))
        boost /= 1 + since * s.boost_decay_rate
    floor = min(s.decay_ceil, s.decay_floor + boost)
    if deep:
        tau = 1.0
    elif span.range_hours > 0:
        e = max(s.min_time_range_hours, span.range_hours)
        lam = s.decay_rate / max(1.0, e / s.reference_hours)
        tau = max(floor, 1 / (1 + age * lam))
    else:
        tau = max(floor, 1 / (1 + age * s.decay_rate))
    kappa = s.resolved_decay_factor if row.resolved and not deep else 1.0
    pi = 1.0
    if last_t is not None and not deep:
        minutes = (now - last_t).total_seconds() / 60.0
        if minutes < s.recent_recall_window_min:
            pi = s.recent_recall_penalty
    c = row.cosine
    if c is not None:
        denom = s.cosine_ceil - s.cosine_floor
        c_hat = 0.0 if denom <= 0 else min(1.0, max(0.0, (c - s.cosine_floor) / denom))
        score = round(math.sqrt(c_hat * tau) * kappa * pi, 4)
    else:
        score = round(math.sqrt(tau) * kappa * pi, 4)
    detail: dict[str, object] = {"age_hours": round(age, 1)}
    if age_unknown:
        detail["age_unknown"] = True
    if row.resolved:
        detail["resolved"] = True
    if c is not None:
        detail["cosine"] = round(c, 4)
    detail["score"] = score
    return score, detail


_KIND_ORDER = {"mem": 0, "ep": 1, "profile": 2}


def confidence_order(row: Candidate) -> tuple[float, float, int, int]:
    """Sort key of the confidence ranking: score descending, ties broken without the fusion.

    Contract 2: with confidence on, the fusion mode picks the candidates but not their order,
    so rrf and rsf must order equal scores alike. A stable sort would keep each mode's fusion
    order among ties (rounded scores tie often); instead ties go to the higher cosine, then
    memories before episodes and the newer row (higher id), as in the vector lists (§5.5).
    """
    cosine = row.cosine if row.cosine is not None else -math.inf
    return (-(row.confidence or 0.0), -cosine, _KIND_ORDER.get(row.kind, 2), -row.id)


def heuristic_gate(pool: int) -> float:
    """m(N) of §7.1: 0.5 for an empty pool, falling to 0.2 at 499 rows."""
    if pool <= 0:
        return 0.5
    return round(0.5 - 0.3 * min(1.0, math.log(pool + 1) / math.log(500)), 4)


def signal_of(row: Candidate) -> str | None:
    """The branch the gate uses for a row: confidence > rsf > cosine > rrf (contract)."""
    if row.confidence is not None:
        return "confidence"
    if row.rsf is not None:
        return "rsf"
    if row.cosine is not None:
        return "cosine"
    if row.rrf is not None:
        return "rrf"
    return None


def gate(
    rows: list[Candidate],
    pool: int,
    deep: bool,
    blank_query: bool,
    fused: tuple[float | None, str | None],
    rrf_k: int,
) -> list[Candidate]:
    """Keep the rows that pass §7.3's first matching branch (order preserved).

    A cosine, rrf or rsf is judged as matched, before the episode-boundary penalty: the
    penalty is a preference among rows, not evidence against a match. Gated after it, every
    keyword-only memory older than ~3 days before the latest episode fell under the rrf gate
    and only episodes were left (docs/compatibility.md, "Episodes in recall").
    """
    m = heuristic_gate(pool)
    if deep:
        m /= 2
    gate_value, gate_signal = fused
    if gate_value is not None and deep:
        gate_value /= 2
    out = []
    for row in rows:
        if row.is_profile:
            if pool >= PROFILE_POOL_MIN:
                out.append(row)
            continue
        sig = signal_of(row)
        if sig is None:
            if blank_query or pool >= UNSCORED_POOL_MIN:
                out.append(row)
            continue
        value = float(getattr(row, sig))
        if sig != "confidence":  # confidence blends age on purpose (§6.4)
            value /= row.penalty
        if gate_value is not None and gate_signal == sig:
            threshold = gate_value
        elif sig == "rrf":
            threshold = m * 3 / (rrf_k + 1)
        else:
            threshold = m
        if value >= threshold:
            out.append(row)
    return out


def autocut(rows: list[Candidate], s: Settings) -> list[Candidate]:
    """Cut at the largest score gap, only on similarity-scale signals (§11)."""
    if not s.autocut_enabled:
        return rows
    scored = [r for r in rows if not r.is_profile]
    if len(scored) < max(2, s.autocut_min_results):
        return rows
    first = scored[0]
    if first.confidence is not None:
        values = [r.confidence or 0.0 for r in scored]
    elif first.rsf is not None or first.rrf is not None:
        return rows  # rank-fusion gaps measure retriever overlap, not relevance
    elif any(r.cosine is None for r in scored):
        return rows
    else:
        values = [r.cosine or 0.0 for r in scored]
    top = values[0]
    if top <= 0:
        return rows
    gaps = [values[i] - values[i + 1] for i in range(len(values) - 1)]
    best = max(gaps)
    if best / top < s.autocut_min_gap_ratio:
        return rows
    keep = {id(r) for r in scored[: gaps.index(best) + 1]}
    return [r for r in rows if r.is_profile or id(r) in keep]


def episode_allowance(limit: int, setting: int) -> int:
    """How many episode rows an answer of `limit` rows may hold: the setting, or (-1) one per
    ten rows asked, at least one."""
    if setting >= 0:
        return setting
    return max(1, -(-limit // 10))


def place_episodes(rows: list[Candidate], limit: int, allowance: int) -> list[Candidate]:
    """The first `limit` rows of a fused answer, at most `allowance` of them episodes, with
    the episodes moved after the memories (the profile, last in a fused list, stays last).

    An episode summarises a session; the turn that answers is a memory. Ranked among them,
    summaries match most questions about their session better than the turn does and took
    the first places (LoCoMo as lived: R@1 0.29 -> 0.02, docs/quality.md). Here they stay in
    the answer as context, and the best row is the best memory. Rows past the allowance
    give their place to the next rows, so `limit` rows still come back when there are.
    """
    head: list[Candidate] = []
    episodes = 0
    for row in rows:
        if len(head) == limit:
            break
        if row.kind == "ep":
            if episodes == allowance:
                continue
            episodes += 1
        head.append(row)
    order = {"mem": 0, "ep": 1}
    return sorted(head, key=lambda r: order.get(r.kind, 2))  # stable: ranks kept within kinds
