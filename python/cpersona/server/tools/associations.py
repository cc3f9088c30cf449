"""CPersona 2.6's associative tools (issue 32): declare_associations, traverse, reconstruct
(the part of reconstruct built here: retrieval/reconstruct.py says which).

Argument names, defaults, answer keys and orderings are 2.6.14's; the tables are 2.6's
(storage/associations.py), so what one declares the other reads. The server records what the
agent declares and infers nothing.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cpersona.models import ProjectFilter
from cpersona.server.access import Access
from cpersona.server.registry import READS, Annotations, ToolSpec, arg
from cpersona.server.tools.memory import SESSION_KEY
from cpersona.storage import associations as decl

if TYPE_CHECKING:
    from cpersona.engine import Engine

#: declare_associations: destructive because of `retract` (2.6.14's hints).
DECLARES = Annotations(read_only=False, destructive=True, idempotent=True)

_ENTITY = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "description": "The canonical name, kept as written."},
        "aliases": {
            "type": "array",
            "items": {"type": "string"},
            "description": "Other names for the same entity. An alias resolves to at most "
            "one entity per scope; a second claim on it is dropped.",
        },
    },
    "required": ["name"],
}
_RELATION = {
    "type": "object",
    "properties": {
        "subject": {"type": "string"},
        "predicate": {"type": "string"},
        "object": {"type": "string"},
    },
    "required": ["subject", "predicate", "object"],
}
ASSOCIATIONS = {
    "type": "object",
    "description": "The entities and relations to declare. Malformed items are reported in "
    "`dropped` and skipped.",
    "properties": {
        "entities": {
            "type": "array",
            "description": "Entities to register (if new) and mark as mentioned. Names and "
            "aliases are compared after normalization (NFKC, case-folded, whitespace "
            "collapsed), so two that normalize alike name one entity.",
            "items": _ENTITY,
        },
        "relations": {
            "type": "array",
            "description": "Declared relations. subject / object are entity names (registered "
            "if new) or record refs 'mem:<id>' / 'ep:<id>' of this agent; predicate is free "
            "text, normalized. On a record -> record relation a predicate of the role "
            "vocabulary (supports, supersedes, corrects, qualifies, contradicts, "
            "temporal_predecessor) is read as that role: recall returns a record's successor "
            "in its place when it is declared superseded or corrected by a record of the "
            "same scope.",
            "items": _RELATION,
        },
    },
}
_RETRACT = {
    "type": "object",
    "description": "Declarations to remove: {relations: [relation ids], mentions: [{entity: "
    "<entity id>, ref: 'mem:<id>'}]}. Only this agent's rows are touched.",
    "properties": {
        "relations": {"type": "array", "items": {"type": "integer"}},
        "mentions": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"entity": {"type": "integer"}, "ref": {"type": "string"}},
            },
        },
    },
}


@dataclass(frozen=True)
class DeclareArgs:
    agent_id: str = arg({"type": "string", "description": "Agent identifier"}, required=True)
    associations: dict[str, Any] = arg(ASSOCIATIONS)
    anchor_ref: str = arg(
        {
            "type": "string",
            "description": "The record this declaration is evidenced by: 'mem:<id>' or "
            "'ep:<id>' of this agent. Optional.",
            "default": "",
        }
    )
    retract: dict[str, Any] = arg(_RETRACT)
    channel: str = arg(
        {
            "type": "string",
            "description": "Memory channel the declaration belongs to. Default: '' (shared).",
        }
    )
    project_id: str = arg(
        {
            "type": "string",
            "description": "Project the declaration belongs to; '' (default) is the global pool.",
        }
    )
    session_key: str = arg(SESSION_KEY)


@dataclass(frozen=True)
class TraverseArgs:
    agent_id: str = arg({"type": "string", "description": "Agent identifier"}, required=True)
    entity: str = arg(
        {"type": "string", "description": "A declared entity name or alias."}, required=True
    )
    max_hops: int = arg(
        {
            "type": "integer",
            "minimum": 0,
            "maximum": decl.TRAVERSE_MAX_HOPS,
            "default": 1,
            "description": "Relations to follow from the entity, in either direction. 0 "
            "returns the entity alone.",
        },
        1,
    )
    limit: int = arg(
        {
            "type": "integer",
            "minimum": 1,
            "maximum": decl.TRAVERSE_MAX_LIMIT,
            "default": 20,
            "description": "Maximum entities returned, and maximum mentioning refs listed "
            "per entity.",
        },
        20,
    )
    channel: str = arg({"type": "string", "description": "Memory channel filter, as in `recall`."})
    #: None (omitted) reads every project, as recall.
    project_id: str | None = arg(
        {"type": "string", "description": "Project filter, as in `recall`."}, None
    )
    source_id: str = arg(
        {
            "type": "string",
            "description": "Source filter on the mentioning records, as in `recall`.",
        }
    )


@dataclass(frozen=True)
class ReconstructArgs:
    agent_id: str = arg({"type": "string", "description": "Agent identifier"}, required=True)
    query: str = arg({"type": "string", "description": "Search query."}, required=True)
    count: int | None = arg(
        {
            "type": "integer",
            "minimum": 0,
            "description": "Ceiling on items returned, not a fill target (default 10; larger "
            "values are lowered to the server maximum, reported in count_policy).",
        },
        None,
    )
    top_k: int | None = arg(
        {
            "type": "integer",
            "minimum": 1,
            "maximum": 100,
            "description": "Candidate depth: how many rows the recall hands to bundling "
            "(default 20). Raise it when items are missing evidence.",
        },
        None,
    )
    max_evidence: int | None = arg(
        {
            "type": "integer",
            "minimum": 1,
            "maximum": decl.TRAVERSE_MAX_LIMIT,
            "description": "Maximum claims per item (default 40); a cut is counted in the "
            "item's claims_omitted.",
        },
        None,
    )
    deep: bool = arg({"type": "boolean", "description": "Deep recall for the candidates."})
    channel: str = arg({"type": "string", "description": "Memory channel filter."})
    project_id: str | None = arg(
        {"type": "string", "description": "Project filter, as in `recall`."}, None
    )
    source_id: str = arg({"type": "string", "description": "Source filter, as in `recall`."})
    session_key: str = arg(SESSION_KEY)
    trace: bool = arg(
        {
            "type": "boolean",
            "description": "Add the candidate refs and the clusters (refs only, no text).",
        }
    )


_EMPTY_DECLARATION = {"entities": [], "mentions": 0, "relations": [], "dropped": []}


def declare(
    engine: Engine,
    agent_id: str,
    associations: dict[str, Any],
    *,
    anchor_ref: str = "",
    project_id: str = "",
    channel: str = "",
) -> dict[str, Any]:
    """One declaration, and the recall probe of its agent invalidated (store's rider too)."""
    scope = decl.DeclScope(agent_id, project_id or "", channel or "")
    out = decl.declare(engine.db, scope, associations, anchor_ref)
    engine.recaller.supersession.invalidate(agent_id)
    return out


def _declare(engine: Engine, a: DeclareArgs) -> dict[str, Any]:
    gate = engine.operating_context.gate(a.project_id, a.agent_id, write=True)
    if gate.refusal is not None:
        return {**gate.refused(), "result": "rejected", **copy.deepcopy(_EMPTY_DECLARATION)}
    skip = engine.pause.skip(
        "declare_associations", a.session_key, result="skipped", **copy.deepcopy(_EMPTY_DECLARATION)
    )
    if skip is not None:
        return {**skip, **gate.extra}
    out: dict[str, Any] = {"ok": True, "result": "declared"}
    # An empty object declares nothing and is treated as absent (2.6.14's reading).
    if a.associations:
        project = gate.project_id or ""
        out.update(
            declare(
                engine,
                a.agent_id,
                a.associations,
                anchor_ref=a.anchor_ref,
                project_id=project,
                channel=a.channel,
            )
        )
    else:
        out.update(copy.deepcopy(_EMPTY_DECLARATION))
    if a.retract:
        retracted = decl.retract(
            engine.db,
            a.agent_id,
            relations=a.retract.get("relations"),
            mentions=a.retract.get("mentions"),
        )
        engine.recaller.supersession.invalidate(a.agent_id)
        out["dropped"].extend(retracted.pop("dropped"))
        out["retracted"] = retracted
    return {**out, **gate.extra}


def _traverse(engine: Engine, a: TraverseArgs) -> dict[str, Any]:
    gate = engine.operating_context.gate(a.project_id, a.agent_id, write=False)
    scope = decl.ReadScope(a.agent_id, ProjectFilter(gate.project_id), a.channel, a.source_id)
    out = decl.traverse(engine.db, scope, a.entity, a.max_hops, a.limit)
    return {**out, **gate.extra}


def _reconstruct(engine: Engine, a: ReconstructArgs) -> dict[str, Any]:
    from cpersona.retrieval.reconstruct import Ask, reconstruct

    gate = engine.operating_context.gate(a.project_id, a.agent_id, write=False)
    ask = Ask(
        a.agent_id,
        a.query,
        a.count,
        a.top_k,
        a.max_evidence,
        a.deep,
        a.channel,
        gate.project_id,
        a.source_id,
        a.session_key,
        a.trace,
    )
    return {**reconstruct(engine, ask), **gate.extra}


def _reconstruct_failure(error: str) -> dict[str, Any]:
    return {"ok": False, "error": error, "items": [], "returned_count": 0}


def _declare_failure(error: str) -> dict[str, Any]:
    return {"ok": False, "error": error, "result": "rejected", **copy.deepcopy(_EMPTY_DECLARATION)}


def _traverse_failure(error: str) -> dict[str, Any]:
    return {"ok": False, "error": error, "entities": [], "relations": []}


_ABOUT_DECLARE = (
    "Declare associative memory after the fact: entities with aliases, and "
    "subject-predicate-object relations, recorded verbatim and walked by traverse and "
    "reconstruct. The server extracts nothing and infers nothing: coverage is exactly what "
    "was declared. `anchor_ref` names the record (`mem:<id>` / `ep:<id>`) the declaration "
    "is evidenced by: every entity named is recorded as mentioned by it and every relation "
    "carries it. Malformed items are reported in `dropped` and skipped; nothing else in the "
    "call is refused for them. `retract` removes relations by id and mentions by {entity, "
    "ref}: the only way a declaration leaves the store. Response: {ok, result:'declared', "
    "entities:[{id, name, created}], mentions, relations:[ids], dropped:[{item, reason}], "
    "retracted?:{relations, mentions}}. Under pause_persistence nothing is written "
    "(result:'skipped', persisted:false)."
)
_ABOUT_TRAVERSE = (
    "The neighbourhood of a declared entity, as a graph: the entity named, its aliases, the "
    "entity -> entity relations declared on it and on what they reach, up to `max_hops` in "
    "either direction, and the refs of the records that mention each entity. Only what was "
    "declared (declare_associations, or `associations` on store); nothing is inferred. No "
    "record text: expand a ref with get_contents. `entity` is a name or an alias, compared "
    "after normalization; when it names more than one entity this call can read, all are "
    "starts. ORDER: entities by hops, then by the most recently declared relation that "
    "reached them, then by id; mentions by record id; relations most recently declared "
    "first. `limit` bounds both the entities returned and the refs listed per entity. "
    "Response: {entity, max_hops, limit, entities:[{id, name, hops, aliases?, mentions?, "
    "mentions_omitted?}], relations:[{id, subject, predicate, object, declared_by, "
    "declared_at, anchor_ref?}], entities_omitted?, bounds?:{omitted:[max_hops | limit]}, "
    "reason?:'no_such_entity'}. Relation ids are what declare_associations' `retract` takes."
)

_ABOUT_RECONSTRUCT = (
    "Answer a question from memory as ITEMS: recall's candidates (`top_k`) bundled into units "
    "of memory, each quoting verbatim its best-ranked record (`content`, `head_ref`; expand a "
    "ref with get_contents). No model is called and nothing is summarised. `count` is a "
    "ceiling, not a fill target: fewer items carry `shortfall_reason`. Records are bundled "
    "when they share a message id or a declared record -> record relation joins them "
    "(declare_associations); a record declared superseded or corrected is a claim of its "
    "successor's item, not an item. ITEM: `claims` lists its records newest first (`ref`, "
    "`as_of`, `why`, `roles`); `roles[].role` names what the referenced row is to this claim "
    "(supports / supersedes / corrects / qualifies / contradicts / temporal_predecessor); "
    "`excerpts` quote the other claims. Response: {items, effective_count, returned_count, "
    "shortfall_reason?, count_policy?, gate_fallback?, trace?}."
)

# Each: name, position, description, arguments, access, handler, hints (ToolSpec's fields).
TOOLS = (
    ToolSpec(
        "declare_associations",
        32,
        _ABOUT_DECLARE,
        DeclareArgs,
        Access.write(),
        _declare,
        DECLARES,
        failure=_declare_failure,
    ),
    ToolSpec(
        "traverse",
        33,
        _ABOUT_TRAVERSE,
        TraverseArgs,
        Access.read(),
        _traverse,
        READS,
        failure=_traverse_failure,
    ),
    ToolSpec(
        "reconstruct",
        34,
        _ABOUT_RECONSTRUCT,
        ReconstructArgs,
        Access.read(),
        _reconstruct,
        READS,
        failure=_reconstruct_failure,
    ),
)
