"""Superseded facts kept out of recall, by declaration only (issue 32 item 2).

An agent declares that a newer record `supersedes` or `corrects` an older one
(`declare_associations`, or `associations` on store: CPersona 2.6's record -> record roles).
Recall then shows the newer record in the older one's place: inside every retriever's ranked
list, before fusion, the older row is replaced by the end of its chain (A superseded by B
superseded by C resolves to C), standing at the older row's rank with its scores, so that the
fused list, the gate and the limit see one row where there was one. `include_superseded`
keeps the older row too, right after its successor. `contradicts` pairs are both kept (the
partner is put right after the row that ranked), no side picked; `qualifies` and `supports`
change nothing. The server infers nothing: only declared relations are read.

What never hides a row: a declaration whose two records are not filed in the same agent,
project and channel (a cross-scope declaration), a cycle (A -> B -> A: every record of it and
every record whose chain reaches it stays), a retracted declaration (it is gone from the
table), and a successor this recall could not return (outside its source filter or time
range: the older row stays).

Cost: a recall for an agent that declares no replacing or contradicting role pays one probe,
cached per agent like the scope stats (`active`); own declarations invalidate it at once.

Hooks: a `Supersession` is the recaller's list step (`Recaller.list_steps`: called on each
channel's hydrated list in turn, the cascade's keyword list too, with the recall's reads and
trace), and `Supersession.marks` is called by the recall tools on the rows returned
(server/tools/recall.py). Everything else is here.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from cpersona.retrieval import trace as tracing
from cpersona.retrieval.candidates import Candidate
from cpersona.retrieval.channel import RankedList
from cpersona.retrieval.hydration import Hydration
from cpersona.retrieval.recall_query import RecallQuery
from cpersona.retrieval.trace import Trace
from cpersona.storage import Store
from cpersona.storage import association_links as role_sql
from cpersona.storage import associations as decl
from cpersona.storage.association_links import Filed, RoleLink
from cpersona.timerange import TimeRange

Ref = tuple[str, int]
#: The roles whose subject replaces its object in recall (subject: the newer record).
REPLACING = decl.REPLACING
CONTRADICTING = ("contradicts",)
#: Rounds of chain following per recall (one read each): a longer chain is left unresolved
#: (its records stay), never followed without bound.
MAX_CHAIN_ROUNDS = 32

#: Reads the rows of refs in this recall's scope and source filter, as candidates.
Hydrate = Callable[[Sequence[tuple[str, int, float]]], list[Candidate]]


def ref_text(ref: Ref) -> str:
    return f"{ref[0]}:{ref[1]}"


def resolve(edges: Iterable[tuple[Ref, Ref]]) -> dict[Ref, tuple[Ref, ...]]:
    """For each older record of `edges` ((newer, older) pairs), the ends of its chains, sorted:
    the records it reaches that nothing replaces. A record from which a cycle is reachable is
    left out (nothing hides it): a cycle is a contradiction in the declarations, not an order.
    """
    succ: dict[Ref, set[Ref]] = {}
    for new, old in edges:
        if new != old:
            succ.setdefault(old, set()).add(new)
    memo: dict[Ref, frozenset[Ref] | None] = {}

    def ends(node: Ref, path: set[Ref]) -> frozenset[Ref] | None:
        if node in memo:
            return memo[node]
        if node in path:
            return None  # a cycle: every record on the way stays
        nexts = succ.get(node)
        if not nexts:
            return frozenset((node,))
        path.add(node)
        found: set[Ref] = set()
        result: frozenset[Ref] | None = None
        for n in sorted(nexts):
            sub = ends(n, path)
            if sub is None:
                break
            found |= sub
        else:
            result = frozenset(found)
        path.discard(node)
        memo[node] = result
        return result

    out: dict[Ref, tuple[Ref, ...]] = {}
    for old in sorted(succ):
        # Recursion depth is bounded by the chain's length, which the reads bound
        # (MAX_CHAIN_ROUNDS per direction).
        terminals = ends(old, set())
        if terminals is not None:
            out[old] = tuple(sorted(terminals))
    return out


def same_scope(a: Filed | None, b: Filed | None, agent_id: str) -> bool:
    """Whether a declaration between records filed at `a` and `b` may hide one for this
    agent: both exist, both are the agent's, in one project and one channel."""
    return (
        a is not None
        and b is not None
        and a.agent_id == agent_id == b.agent_id
        and a.project_id == b.project_id
        and a.channel == b.channel
    )


@dataclass
class Plan:
    """What one recall replaces: each older record's successors this recall may return, the
    role that replaced it, and the contradicting partners of each record."""

    replaced_by: dict[Ref, tuple[Ref, ...]] = field(default_factory=dict)
    role: dict[Ref, str] = field(default_factory=dict)
    contradicts: dict[Ref, tuple[Ref, ...]] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.replaced_by or self.contradicts)


@dataclass(frozen=True, slots=True)
class Declared:
    """The valid declarations around a set of records: replacing edges (newer, older, role)
    in one scope, and contradicting pairs."""

    edges: tuple[tuple[Ref, Ref, str], ...]
    contradicts: tuple[tuple[Ref, Ref], ...]
    filed: Mapping[Ref, Filed]


class Supersession:
    """One store's supersession step: the cached probe, the plan, the replacement, the marks."""

    def __init__(self, db: Store, ttl_seconds: float = 60.0) -> None:
        self.db = db
        self.ttl = ttl_seconds
        self._probe: dict[str, tuple[float, bool]] = {}
        self._lock = threading.Lock()
        #: Per recall (keyed on its hydration, which lives as long as the recall): the refs
        #: planned so far and their plan, so that each list reads only what is new.
        self._plans: weakref.WeakKeyDictionary[Hydration, tuple[set[Ref], Plan]] = (
            weakref.WeakKeyDictionary()
        )

    # -- the probe ----------------------------------------------------------------------------

    def active(self, agent_id: str) -> bool:
        """Whether `agent_id` declares any replacing or contradicting role (cached: another
        process's first declaration shows within the TTL, this process's at once)."""
        now = time.monotonic()
        with self._lock:
            hit = self._probe.get(agent_id)
        if hit is not None and now - hit[0] < self.ttl:
            return hit[1]
        found = role_sql.declares_roles(self.db, agent_id, (*REPLACING, *CONTRADICTING))
        with self._lock:
            if len(self._probe) >= 4096:
                self._probe.clear()
            self._probe[agent_id] = (now, found)
        return found

    def _touched(self, agent_id: str, refs: list[Ref]) -> bool:
        """The probe, then whether any of `refs` is an end of a declared role at all: one
        statement, and on an agent that declares, most recalls stop there."""
        return self.active(agent_id) and role_sql.touches_roles(
            self.db, agent_id, refs, (*REPLACING, *CONTRADICTING)
        )

    def invalidate(self, agent_id: str | None = None) -> None:
        with self._lock:
            if agent_id is None:
                self._probe.clear()
            else:
                self._probe.pop(agent_id, None)

    # -- reading the declarations -------------------------------------------------------------

    def declared(self, agent_id: str, refs: Iterable[Ref], *, forward: bool = True) -> Declared:
        """The replacing chains through `refs` (forward: towards the newer records; backward:
        towards the older) and the contradicting pairs touching them, read in rounds (one
        read per chain step), with where each record is filed."""
        start = list(dict.fromkeys(refs))
        links: dict[int, RoleLink] = {}
        seen = set(start)
        frontier = start
        for _ in range(MAX_CHAIN_ROUNDS):
            if not frontier:
                break
            found = role_sql.role_links(
                self.db,
                agent_id,
                frontier,
                REPLACING,
                as_object=forward,
                as_subject=not forward,
            )
            nxt = []
            for link in found:
                links[link.relation_id] = link
                for end in (link.subject, link.obj):
                    if end not in seen:
                        seen.add(end)
                        nxt.append(end)
            frontier = nxt
        against = role_sql.role_links(
            self.db, agent_id, start, CONTRADICTING, as_object=True, as_subject=True
        )
        records = set(seen) | {e for link in against for e in (link.subject, link.obj)}
        filed = role_sql.filed(self.db, records)
        edges = tuple(
            (link.subject, link.obj, link.role)
            for link in sorted(links.values(), key=lambda lk: lk.relation_id)
            if same_scope(filed.get(link.subject), filed.get(link.obj), agent_id)
            and link.subject != link.obj
        )
        pairs = tuple(
            (link.subject, link.obj)
            for link in against
            if same_scope(filed.get(link.subject), filed.get(link.obj), agent_id)
            and link.subject != link.obj
        )
        return Declared(edges, pairs, filed)

    def plan(self, agent_id: str, refs: Iterable[Ref], span: TimeRange | None) -> Plan:
        """What this recall replaces among `refs` (its arms' candidates)."""
        wanted = [r for r in dict.fromkeys(refs) if r[0] in ("mem", "ep")]
        if not wanted or not self._touched(agent_id, wanted):
            return Plan()
        found = self.declared(agent_id, wanted)
        chains = resolve((new, old) for new, old, _ in found.edges)
        plan = Plan()
        direct = {old: role for _, old, role in found.edges}
        for old in wanted:
            ends = chains.get(old)
            if not ends:
                continue
            # A successor outside the call's time range is one it could not return.
            ends = tuple(e for e in ends if span is None or span.admits(found.filed[e].instant))
            if ends:
                plan.replaced_by[old] = ends
                plan.role[old] = direct[old]
        partners: dict[Ref, set[Ref]] = {}
        for a, b in found.contradicts:
            partners.setdefault(a, set()).add(b)
            partners.setdefault(b, set()).add(a)
        for ref in wanted:
            if ref in partners:
                plan.contradicts[ref] = tuple(
                    p
                    for p in sorted(partners[ref])
                    if span is None or span.admits(found.filed[p].instant)
                )
        return plan

    # -- the replacement (the pipeline's list step) --------------------------------------------

    def __call__(
        self, query: RecallQuery, ranked: RankedList, reads: Hydration, trace: Trace
    ) -> RankedList:
        """The list step (pipeline.ListStep): `ranked` with every superseded row replaced by
        its successors at its rank and with its scores (its successors first, the row kept
        after them with `include_superseded`), and each contradicting partner put right
        after its row. Successors are read through `reads`, in the recall's scope."""
        agent_id = query.scope.agent_id
        refs = [(r.kind, r.id) for r in ranked.rows if r.kind in ("mem", "ep")]
        if not refs or not self.active(agent_id):
            return ranked
        plan = self._recall_plan(reads, agent_id, refs, query.scope.span)
        trace(
            "supersession",
            ranked.rows,
            tracing.supersession_detail(plan.replaced_by, plan.role, plan.contradicts),
        )
        if not plan:
            return ranked
        (rows,) = apply(plan, [ranked.rows], reads.candidates, query.include_superseded)
        return replace(ranked, rows=rows)

    def _recall_plan(
        self, reads: Hydration, agent_id: str, refs: list[Ref], span: TimeRange | None
    ) -> Plan:
        """One recall's plan, grown list by list: the refs an earlier list of the recall
        planned are not read again (a ref's plan depends on its own declarations only)."""
        with self._lock:
            planned, plan = self._plans.setdefault(reads, (set(), Plan()))
        new = [r for r in dict.fromkeys(refs) if r not in planned]
        if new:
            more = self.plan(agent_id, new, span)
            plan.replaced_by.update(more.replaced_by)
            plan.role.update(more.role)
            plan.contradicts.update(more.contradicts)
            planned.update(new)
        return plan

    # -- the marks (the tools' hook) ----------------------------------------------------------

    def marks(self, agent_id: str, refs: Sequence[Ref]) -> dict[Ref, dict[str, Any]]:
        """The markers of returned rows: `replaces` ([{ref, role}], the older records a row
        stands for), `replaced_by` ([{ref, role}], on an older row still returned) and
        `contradicts` ([refs]). Empty for an agent without such declarations."""
        wanted = [r for r in dict.fromkeys(refs) if r[0] in ("mem", "ep")]
        if not wanted or not self._touched(agent_id, wanted):
            return {}
        back = self.declared(agent_id, wanted, forward=False)
        ahead = self.declared(agent_id, wanted, forward=True)
        out: dict[Ref, dict[str, Any]] = {}
        edges = {(n, o): role for n, o, role in (*back.edges, *ahead.edges)}
        chains = resolve(edges)
        roles = {old: role for (_, old), role in sorted(edges.items())}
        for ref in wanted:
            olds = sorted(old for old, ends in chains.items() if ref in ends)
            if olds:
                out.setdefault(ref, {})["replaces"] = [
                    {"ref": ref_text(o), "role": roles[o]} for o in olds
                ]
            if ref in chains:
                out.setdefault(ref, {})["replaced_by"] = [
                    {"ref": ref_text(n), "role": roles[ref]} for n in chains[ref]
                ]
        for a, b in ahead.contradicts:
            for mine, other in ((a, b), (b, a)):
                if mine in wanted:
                    listed = out.setdefault(mine, {}).setdefault("contradicts", [])
                    if ref_text(other) not in listed:
                        listed.append(ref_text(other))
        return out


def apply(
    plan: Plan,
    lists: Sequence[list[Candidate]],
    hydrate: Hydrate,
    include_superseded: bool = False,
) -> list[list[Candidate]]:
    """The replacement of the list step on a plan already made (plain: the unit tests call
    it with several lists)."""
    needed = sorted(
        {e for ends in plan.replaced_by.values() for e in ends}
        | {p for ps in plan.contradicts.values() for p in ps}
    )
    rows = {(r.kind, r.id): r for r in hydrate([(k, i, 0.0) for k, i in needed])}
    return [_replaced(plan, ranked, rows, include_superseded) for ranked in lists]


def _replaced(
    plan: Plan, ranked: list[Candidate], rows: Mapping[Ref, Candidate], include_superseded: bool
) -> list[Candidate]:
    kept: list[Candidate] = []
    placed: set[Ref] = set()

    def put(row: Candidate, like: Candidate | None = None) -> None:
        ref = (row.kind, row.id)
        if ref in placed:
            return
        placed.add(ref)
        if like is not None:  # a stand-in: the rank's scores, its own text
            row = replace(row, cosine=like.cosine, bm25=like.bm25, backfilled=False)
        kept.append(row)

    for row in ranked:
        ref = (row.kind, row.id)
        ends = [rows[e] for e in plan.replaced_by.get(ref, ()) if e in rows]
        if ends:
            for successor in ends:
                put(successor, like=row)
            if include_superseded:
                put(row)
        else:
            put(row)
        for partner in plan.contradicts.get(ref, ()):
            if partner in rows:
                put(rows[partner], like=row)
    return kept
