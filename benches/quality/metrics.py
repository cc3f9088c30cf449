"""Ranking metrics over one ranked list (best first) and a set of relevant keys."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

KS = (1, 5, 10)


def recall_at(ranked: Sequence[str], relevant: frozenset[str], k: int) -> float:
    """Share of the relevant keys found in the first k."""
    return len(relevant.intersection(ranked[:k])) / len(relevant)


def ndcg_at(ranked: Sequence[str], relevant: frozenset[str], k: int = 10) -> float:
    """Binary-gain nDCG@k."""
    dcg = sum(1.0 / math.log2(i + 2) for i, key in enumerate(ranked[:k]) if key in relevant)
    ideal = sum(1.0 / math.log2(i + 2) for i in range(min(len(relevant), k)))
    return dcg / ideal


def mrr_at(ranked: Sequence[str], relevant: frozenset[str], k: int = 10) -> float:
    for i, key in enumerate(ranked[:k]):
        if key in relevant:
            return 1.0 / (i + 1)
    return 0.0


@dataclass
class Tally:
    """Sums over the queries of one group; `row()` gives the means."""

    n: int = 0
    sums: dict[str, float] = field(default_factory=dict)
    returned: int = 0  # rows returned in all (for probes: what should be little)
    empty: int = 0  # queries answered with no row
    #: Per query: the best cosine among the rows returned (None: no row had one) and, for
    #: answerable queries, its R@10: what "nothing relevant" thresholds are judged on.
    best: list[tuple[float | None, float | None]] = field(default_factory=list)

    def add(
        self,
        ranked: Sequence[str],
        relevant: frozenset[str],
        rows: int,
        best_cosine: float | None = None,
    ) -> None:
        self.n += 1
        self.returned += rows
        self.empty += rows == 0
        if not relevant:
            self.best.append((best_cosine, None))
            return
        self.best.append((best_cosine, recall_at(ranked, relevant, 10)))
        values = {f"R@{k}": recall_at(ranked, relevant, k) for k in KS}
        values["nDCG@10"] = ndcg_at(ranked, relevant)
        values["MRR@10"] = mrr_at(ranked, relevant)
        for name, value in values.items():
            self.sums[name] = self.sums.get(name, 0.0) + value

    def row(self) -> dict[str, float]:
        out = {name: total / self.n for name, total in self.sums.items()} if self.n else {}
        out["n"] = self.n
        out["rows"] = self.returned / self.n if self.n else 0.0
        out["empty"] = self.empty / self.n if self.n else 0.0
        return out


def merge(tallies: Iterable[Tally]) -> Tally:
    total = Tally()
    for t in tallies:
        total.n += t.n
        total.returned += t.returned
        total.empty += t.empty
        total.best += t.best
        for name, value in t.sums.items():
            total.sums[name] = total.sums.get(name, 0.0) + value
    return total


def separation(answerable: Tally, probes: Tally, max_loss: float = 0.01) -> dict[str, float]:
    """How well "the best row's cosine is below t" tells an unanswerable question (a probe)
    from an answerable one: the AUC of the best cosine, and the largest t that costs the
    answerable questions at most `max_loss` of R@10 (their answer emptied below t), with the
    share of probes it empties."""
    pos = [c if c is not None else 0.0 for c, _ in answerable.best]
    neg = [c if c is not None else 0.0 for c, _ in probes.best]
    if not pos or not neg:
        return {}
    wins = sum((p > q) + 0.5 * (p == q) for p in pos for q in neg)
    auc = wins / (len(pos) * len(neg))
    total = sum(r or 0.0 for _, r in answerable.best) / len(pos)
    best_t, best_share = 0.0, 0.0
    for t in sorted(set(neg)):
        kept = sum(r or 0.0 for c, r in answerable.best if (c or 0.0) >= t) / len(pos)
        if total - kept <= max_loss:
            best_t, best_share = t, sum(q < t for q in neg) / len(neg)
    return {"auc": auc, "threshold": best_t, "probes_emptied": best_share, "R@10": total}
