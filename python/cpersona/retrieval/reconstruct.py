"""`reconstruct` (CPersona 2.6's reconstructive recall, issue 32), the part of it built here:
recall's candidates bundled into items by what is declared or shared, each quoting its head
record verbatim, with the other records as claims (newest first) and excerpts.

Built: 2.6.14's argument names `agent_id, query, count, top_k, max_evidence, deep, channel,
project_id, source_id, session_key, trace` and its answer keys (`items[{content, head_ref,
claims[{ref, as_of, why?, roles?}], independence_reason?, ranges, excerpts?,
claims_omitted?}], effective_count, returned_count, shortfall_reason?, count_policy?,
gate_fallback?, trace?`). Bundling keys: a shared message id (`cluster:msg_id`) and a declared
record -> record relation between two candidates (`cluster:relation`). The candidate recall
keeps superseded rows (`include_superseded`), so a superseded record is a claim of its
successor's item, with its role, rather than an item of its own.

Not built (2.6.14 has them): the entity walk (`max_hops`), passage quotes of long records
(`ranges` here is the whole record), budgets and `mode` / `lite`, reserved seats, `time_cue`,
adjacency clusters. A call that sends those arguments is answered without them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cpersona.models import ProjectFilter
from cpersona.retrieval.candidates import Candidate
from cpersona.retrieval.request import RecallRequest
from cpersona.storage import association_links as role_sql
from cpersona.storage import associations as decl

if TYPE_CHECKING:
    from cpersona.engine import Engine

DEFAULT_COUNT = 10
MAX_COUNT = 10
DEFAULT_TOP_K = 20
DEFAULT_MAX_EVIDENCE = 40


@dataclass(frozen=True, slots=True)
class Ask:
    """One reconstruct call's arguments, as the tool coerced them (None: omitted)."""

    agent_id: str
    query: str
    count: int | None
    top_k: int | None
    max_evidence: int | None
    deep: bool
    channel: str
    project_id: str | None
    source_id: str
    session_key: str
    trace: bool


def _ref(row: Candidate) -> str:
    return f"{row.kind}:{row.id}"


def reconstruct(engine: Engine, ask: Ask) -> dict[str, Any]:
    count = DEFAULT_COUNT if ask.count is None else max(0, ask.count)
    out: dict[str, Any] = {}
    if count > MAX_COUNT:
        out["count_policy"] = {"requested": count, "applied": MAX_COUNT, "reason": "server_max"}
        count = MAX_COUNT
    top_k = max(1, min(100, ask.top_k or DEFAULT_TOP_K))
    evidence = max(1, min(decl.TRAVERSE_MAX_LIMIT, ask.max_evidence or DEFAULT_MAX_EVIDENCE))
    result = engine.recaller.recall(
        RecallRequest(
            agent_id=ask.agent_id,
            query=ask.query,
            limit=top_k,
            deep=ask.deep,
            channel=ask.channel,
            project=ProjectFilter(ask.project_id),
            source_id=ask.source_id,
            session_key=ask.session_key,
            paused=engine.pause.active(ask.session_key) is not None,
            include_superseded=True,
        )
    )
    pool = [r for r in result.rows if not r.is_profile]
    groups, why, roles = _bundle(engine, ask.agent_id, pool)
    items = [_item(members, why, roles, evidence) for members in groups[:count]]
    body: dict[str, Any] = {
        "items": items,
        "effective_count": count,
        "returned_count": len(items),
    }
    if count == 0:
        body["shortfall_reason"] = "count_zero"
    elif not pool:
        body["shortfall_reason"] = "no_relevant_evidence"
    elif len(items) < count:
        body["shortfall_reason"] = "exhausted_candidates"
    body.update(out)
    if result.gate_fallback:
        body["gate_fallback"] = True
    if ask.trace:
        body["trace"] = {
            "candidate_refs": [_ref(r) for r in pool],
            "clusters": [[_ref(r) for r in g] for g in groups if len(g) > 1],
        }
    return body


def _bundle(
    engine: Engine, agent_id: str, pool: list[Candidate]
) -> tuple[list[list[Candidate]], dict[str, str], dict[str, list[dict[str, str]]]]:
    """The candidates joined into groups (best-ranked group first, members in rank order),
    each member's `why`, and each member's roles (what another member is to it)."""
    parent = list(range(len(pool)))
    at = {_ref(r): i for i, r in enumerate(pool)}

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    def join(a: int, b: int) -> None:
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)

    why: dict[str, str] = {}
    by_msg: dict[str, int] = {}
    for i, row in enumerate(pool):
        if row.kind == "mem" and row.msg_id:
            if row.msg_id in by_msg:
                join(by_msg[row.msg_id], i)
                why.setdefault(_ref(row), "cluster:msg_id")
                why.setdefault(_ref(pool[by_msg[row.msg_id]]), "cluster:msg_id")
            else:
                by_msg[row.msg_id] = i
    roles: dict[str, list[dict[str, str]]] = {}
    refs = [(r.kind, r.id) for r in pool if r.kind in ("mem", "ep")]
    for link in role_sql.role_links(engine.db, agent_id, refs, decl.ROLES):
        subject, obj = f"{link.subject[0]}:{link.subject[1]}", f"{link.obj[0]}:{link.obj[1]}"
        if subject in at and obj in at and subject != obj:
            join(at[subject], at[obj])
            for ref in (subject, obj):
                why[ref] = f"relation:{link.role}"
            # The role names what the referenced row is to this claim (2.6's direction).
            roles.setdefault(obj, []).append({"ref": subject, "role": link.role})
    grouped: dict[int, list[Candidate]] = {}
    for i, row in enumerate(pool):
        grouped.setdefault(find(i), []).append(row)
    return [grouped[k] for k in sorted(grouped)], why, roles


def _item(
    members: list[Candidate],
    why: dict[str, str],
    roles: dict[str, list[dict[str, str]]],
    evidence: int,
) -> dict[str, Any]:
    head = members[0]
    # Claims newest first; a tie keeps the recall's order.
    ordered = sorted(members, key=lambda r: r.timestamp or "", reverse=True)
    claims = []
    for row in ordered[:evidence]:
        claim: dict[str, Any] = {"ref": _ref(row), "as_of": row.timestamp}
        if len(members) > 1 and _ref(row) in why:
            claim["why"] = why[_ref(row)]
        if roles.get(_ref(row)):
            claim["roles"] = roles[_ref(row)]
        claims.append(claim)
    item: dict[str, Any] = {"content": head.content, "head_ref": _ref(head), "claims": claims}
    if len(members) > 1:
        reasons = sorted({why[_ref(r)].split(":")[0] for r in members if _ref(r) in why})
        item["independence_reason"] = (
            "cluster:relation" if "relation" in reasons else "cluster:msg_id"
        )
    item["ranges"] = [[0, len(head.content)]]
    others = [r for r in ordered[:evidence] if r is not head]
    if others:
        item["excerpts"] = [{"ref": _ref(r), "content": r.content} for r in others]
    if len(ordered) > evidence:
        item["claims_omitted"] = len(ordered) - evidence
    return item
