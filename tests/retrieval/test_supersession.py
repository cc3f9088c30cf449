"""The supersession step (issue 32 item 2) against a plain-Python oracle: chains resolve to
their newest record, and cycles, retractions and cross-scope declarations never hide a row
they should not; the replacement inside a ranked list keeps every row nothing replaces and
puts the successor at the replaced row's rank.

`resolve` and `apply` are called directly; the plan is also checked on real stores (SQLite
and PostgreSQL), with declarations written and retracted through storage.associations."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from cpersona.retrieval.candidates import Candidate
from cpersona.retrieval.supersession import Plan, Supersession, apply, resolve
from cpersona.storage import associations as decl
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

Ref = tuple[str, int]
NODES = 8

edges_st = st.lists(st.tuples(st.integers(0, NODES - 1), st.integers(0, NODES - 1)), max_size=14)


def oracle(edges: list[tuple[Ref, Ref]]) -> dict[Ref, tuple[Ref, ...]]:
    """Each older record whose every chain ends without meeting a cycle -> the chains' ends."""
    succ: dict[Ref, set[Ref]] = {}
    for new, old in edges:
        if new != old:
            succ.setdefault(old, set()).add(new)

    def reach(x: Ref) -> set[Ref]:
        seen: set[Ref] = set()
        todo = list(succ.get(x, ()))
        while todo:
            n = todo.pop()
            if n not in seen:
                seen.add(n)
                todo += succ.get(n, ())
        return seen

    out = {}
    for x in succ:
        reached = reach(x)
        if any(n in reach(n) for n in reached | {x}):
            continue  # a cycle is reachable: nothing on the way is hidden
        out[x] = tuple(sorted(n for n in reached if n not in succ))
    return out


def mem(i: int) -> Ref:
    return ("mem", i)


@given(edges_st)
def test_resolve_matches_the_oracle(pairs: list[tuple[int, int]]) -> None:
    edges = [(mem(a), mem(b)) for a, b in pairs]
    assert resolve(edges) == oracle(edges)


@given(st.lists(st.integers(2, 6), min_size=1, max_size=4))
def test_a_chain_resolves_to_its_newest(lengths: list[int]) -> None:
    edges, newest = [], {}
    base = 0
    for n in lengths:
        chain = [mem(base + k) for k in range(n)]
        edges += [(chain[k + 1], chain[k]) for k in range(n - 1)]
        newest.update({r: (chain[-1],) for r in chain[:-1]})
        base += n
    assert resolve(edges) == newest


@given(st.integers(2, 6), st.integers(0, 3))
def test_a_cycle_hides_nothing_on_it_or_before_it(n: int, lead: int) -> None:
    ring = [mem(k) for k in range(n)]
    edges = [(ring[(k + 1) % n], ring[k]) for k in range(n)]
    edges += [(ring[0], mem(100 + k)) for k in range(lead)]  # records leading into it
    assert resolve(edges) == {}


def cand(ref: Ref, score: float) -> Candidate:
    return Candidate(
        kind=ref[0], id=ref[1], content=f"{ref}", source={}, timestamp="", cosine=score
    )


@given(
    st.lists(st.integers(0, NODES - 1), unique=True, max_size=NODES),
    edges_st,
    st.booleans(),
)
def test_apply_hides_only_what_a_readable_successor_replaces(
    ranked_ids: list[int], pairs: list[tuple[int, int]], include: bool
) -> None:
    edges = [(mem(a), mem(b)) for a, b in pairs]
    chains = resolve(edges)
    ranked = [cand(mem(i), 1.0 - i / 100) for i in ranked_ids]
    unreadable = {mem(NODES - 1)}  # a successor this recall cannot read: hydration drops it
    plan = Plan(
        replaced_by={r: e for r, e in chains.items() if r in {(c.kind, c.id) for c in ranked}}
    )

    def hydrate(hits: Any) -> list[Candidate]:
        return [cand((k, i), 0.0) for k, i, _ in hits if (k, i) not in unreadable]

    (out,) = apply(plan, [ranked], hydrate, include_superseded=include)
    got = [(c.kind, c.id) for c in out]
    assert len(got) == len(set(got))
    ranked_refs = [(c.kind, c.id) for c in ranked]
    for where, ref in enumerate(ranked_refs):
        readable_ends = [e for e in chains.get(ref, ()) if e not in unreadable]
        if not readable_ends or include:
            assert ref in got  # nothing (readable) replaces it, or it was asked for
            continue
        assert ref not in got
        for end in readable_ends:  # at the replaced row's rank: before every row after it
            assert end in got
            later = [r for r in ranked_refs[where + 1 :] if r in got and r != end]
            assert all(got.index(end) < got.index(r) for r in later)
    for ref in got:  # nothing appears that neither ranked nor replaces a ranked row
        assert ref in ranked_refs or any(ref in chains.get(r, ()) for r in ranked_refs)


def test_apply_puts_the_successor_at_the_replaced_rank_with_its_scores() -> None:
    ranked = [cand(mem(1), 0.9), cand(mem(2), 0.8), cand(mem(3), 0.7)]
    plan = Plan(replaced_by={mem(1): (mem(5),)}, role={mem(1): "supersedes"})

    def hydrate(hits: Any) -> list[Candidate]:
        return [cand((k, i), 0.1) for k, i, _ in hits]

    (plain,) = apply(plan, [ranked], hydrate)
    (both,) = apply(plan, [ranked], hydrate, include_superseded=True)
    assert [(c.id, c.cosine) for c in plain] == [(5, 0.9), (2, 0.8), (3, 0.7)]
    assert [c.id for c in both] == [5, 1, 2, 3]
    assert len(plain) == len(ranked)  # limit rows stay limit rows


# --------------------------------------------------------------------------- on a real store


@contextmanager
def opened(store_backend: str, database_url_for: Any, where: Path) -> Iterator[Any]:
    from cpersona.storage import open_database

    db = open_database(str(where), fts_enabled=False, database_url=database_url_for(str(where)))
    try:
        yield db
    finally:
        db.close()


SCOPES = [("", ""), ("p", ""), ("", "c")]


def test_cross_scope_and_retracted_declarations_hide_nothing(
    store_backend: str, database_url_for: Any, tmp_path: Path
) -> None:
    @settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
    @given(
        scopes=st.lists(st.integers(0, len(SCOPES) - 1), min_size=NODES, max_size=NODES),
        pairs=edges_st,
        retracted=st.sets(st.integers(0, 13)),
        other_agent=st.sets(st.integers(0, NODES - 1)),
    )
    def check(
        scopes: list[int], pairs: list[tuple[int, int]], retracted: set[int], other_agent: set[int]
    ) -> None:
        check.n += 1  # type: ignore[attr-defined]
        with opened(store_backend, database_url_for, tmp_path / f"s{check.n}.db") as db:  # type: ignore[attr-defined]
            ids = []
            with db.atomic() as conn:
                for k in range(NODES):
                    project, channel = SCOPES[scopes[k]]
                    agent = "b" if k in other_agent else "a"
                    row = conn.execute(
                        "INSERT INTO memories (agent_id, project_id, channel, content, timestamp) "
                        "VALUES (?, ?, ?, ?, '2026-01-01T00:00:00Z') RETURNING id",
                        (agent, project, channel, f"row {k}"),
                    ).fetchall()
                    ids.append(int(row[0][0]))
            rel_ids = []
            for a, b in pairs:
                out = decl.declare(
                    db,
                    decl.DeclScope("a"),
                    {
                        "relations": [
                            {
                                "subject": f"mem:{ids[a]}",
                                "predicate": "supersedes",
                                "object": f"mem:{ids[b]}",
                            }
                        ]
                    },
                )
                rel_ids.append(out["relations"][0] if out["relations"] else None)
            gone = [rel_ids[i] for i in retracted if i < len(rel_ids) and rel_ids[i] is not None]
            decl.retract(db, "a", relations=gone)
            kept = [
                (mem(ids[a]), mem(ids[b]))
                for i, (a, b) in enumerate(pairs)
                if rel_ids[i] is not None
                and rel_ids[i] not in gone
                and scopes[a] == scopes[b]
                and a not in other_agent
                and b not in other_agent
            ]
            expected = oracle(kept)
            refs = [mem(i) for i in ids]
            plan = Supersession(db).plan("a", refs, None)
            assert plan.replaced_by == {r: e for r, e in expected.items() if r in refs}

    check.n = 0  # type: ignore[attr-defined]
    check()
