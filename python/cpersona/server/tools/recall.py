"""Retrieval tools: recall, recall_with_context, get_contents."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cpersona.config import Settings
from cpersona.models import ProjectFilter
from cpersona.operating_context import Gate
from cpersona.retrieval import context as ctx
from cpersona.retrieval import messages as msgs
from cpersona.server.access import Access
from cpersona.server.registry import READS, ToolSpec, arg
from cpersona.server.tools.memory import SESSION_KEY, SINCE, STR, UNTIL, span_of
from cpersona.session import bucket
from cpersona.timerange import RangeError, TimeRange

if TYPE_CHECKING:
    from cpersona.engine import Engine
    from cpersona.retrieval.candidates import Candidate
    from cpersona.retrieval.pipeline import RecallRequest, RecallResult
    from cpersona.retrieval.trace import RecallTrace

LIMIT = {"type": "integer", "minimum": 0, "maximum": 100, "default": 10}
QUERY = {"type": "string", "description": "What to remember; blank lists the newest."}
DEEP = {"type": "boolean", "description": "Relax the quality gate (halves it)."}
INCLUDE_SUPERSEDED = {
    "type": "boolean",
    "description": "Also return the records declared superseded or corrected (by "
    "declare_associations, or store's `associations`) beside their successors, each marked; "
    "default false returns the newest record of a chain in the place of the older ones, "
    "with `replaces`.",
}
TRACE = {
    "type": "boolean",
    "description": "Add `trace` to the answer: each retriever's ranked refs with ranks and "
    "scores, what declared supersession replaced, the fused order, the episode penalty, the "
    "gate's decision per row, autocut and the limit's cut. References and scores only, never "
    "stored text; not stored. Default false: the answer is unchanged.",
}
EXTERNAL_CONTEXT = {
    "type": "array",
    "items": {
        "type": "object",
        "properties": {"role": {}, "content": {}, "name": {}, "user_id": {}, "timestamp": {}},
    },
}


# The two recall tools publish their arguments in this order: the query's (_Query), then
# recall's exclude_contents, then the scope both share (_Scope), then recall_with_context's
# external_context. A dataclass lists its bases' fields in reverse method-resolution order, so
# `class X(_Scope, _Query)` lists _Query's first; `_request` reads the attributes both share.
@dataclass(frozen=True)
class _Query:
    agent_id: str = arg(STR, required=True)
    query: str = arg(QUERY, required=True)
    limit: int = arg(LIMIT, 10)
    deep: bool = arg(DEEP)
    channel: str = arg(STR)


@dataclass(frozen=True)
class _Scope:
    #: None (omitted) recalls from every project, unlike '' (the global pool).
    project_id: str | None = arg(STR, None)
    source_id: str = arg(STR)
    full_content: bool = arg({"type": "boolean"})
    session_key: str = arg(SESSION_KEY)
    since: str | None = arg(SINCE, None)
    until: str | None = arg(UNTIL, None)
    #: issue 32: superseded rows kept beside their successors, each marked.
    include_superseded: bool = arg(INCLUDE_SUPERSEDED)
    #: issue 32: what each stage kept, dropped and reordered (retrieval/trace.py).
    trace: bool = arg(TRACE)


@dataclass(frozen=True)
class _Excluding(_Query):
    exclude_contents: list[str] = arg({"type": "array", "items": {"type": "string"}})


@dataclass(frozen=True)
class RecallArgs(_Scope, _Excluding):
    pass


@dataclass(frozen=True)
class RecallWithContextArgs(_Scope, _Query):
    external_context: list[Any] = arg(EXTERNAL_CONTEXT)


@dataclass(frozen=True)
class GetContentsArgs:
    agent_id: str = arg(STR, required=True)
    refs: list[str] = arg(
        {"type": "array", "items": {"type": "string"}, "maxItems": msgs.CONTENTS_MAX_REFS},
        required=True,
    )


Recalling = RecallArgs | RecallWithContextArgs


def _request(
    engine: Engine, a: Recalling, gate: Gate, exclude: list[str], span: TimeRange | None
) -> RecallRequest:
    # The pipeline (and numpy) loads with the first recall, not with tools/list.
    from cpersona.retrieval.pipeline import RecallRequest

    return RecallRequest(
        agent_id=a.agent_id,
        query=a.query,
        limit=a.limit,
        deep=a.deep,
        channel=a.channel,
        exclude_contents=tuple(exclude),
        project=ProjectFilter(gate.project_id),
        source_id=a.source_id,
        session_key=a.session_key,
        # While the caller's bucket is paused, recall-count bookkeeping is skipped (§10.3).
        paused=engine.pause.active(a.session_key) is not None,
        span=span,
        include_superseded=a.include_superseded,
    )


def _range_failure(exc: RangeError) -> dict[str, Any]:
    # Refusals keep the documented collection key present (surface.md §1.3).
    return {"ok": False, "messages": [], "error": str(exc)}


def _gate(engine: Engine, a: Recalling) -> Gate:
    # Reads never refuse at the OC gate (surface.md §6.6); they only resolve and warn.
    gate: Gate = engine.operating_context.gate(a.project_id, a.agent_id, write=False)
    return gate


def _envelope(
    engine: Engine,
    a: Recalling,
    gate: Gate,
    result: RecallResult,
    messages: list[dict[str, Any]],
) -> dict[str, Any]:
    out: dict[str, Any] = {"messages": messages}
    if result.gate_fallback:
        out["gate_fallback"] = True
    if result.advisory is not None:
        out["advisory"] = result.advisory
    notice = engine.updates.notice(bucket(a.session_key).name)
    if notice is not None:
        out["update"] = notice
    cap = engine.settings.recall_preview_chars
    if a.full_content:
        if msgs.apply_full_content_budget(messages, cap):
            out["full_content_budget_chars"] = msgs.FULL_CONTENT_BUDGET
    else:
        msgs.apply_preview(messages, cap)
    out.update(gate.extra)
    return out


def _recall(engine: Engine, a: RecallArgs) -> dict[str, Any]:
    try:
        span = span_of(a)
    except RangeError as exc:
        return _range_failure(exc)
    gate = _gate(engine, a)
    trace = _tracer(a)
    result = _run(engine, _request(engine, a, gate, list(a.exclude_contents), span), trace)
    messages = [msgs.message(r) for r in reversed(result.rows)]
    _mark_declared(engine, a.agent_id, list(reversed(result.rows)), messages)
    return _traced(_envelope(engine, a, gate, result, messages), trace)


def _tracer(a: Recalling) -> RecallTrace | None:
    if not a.trace:
        return None
    from cpersona.retrieval.trace import RecallTrace

    return RecallTrace()


def _run(engine: Engine, req: RecallRequest, trace: RecallTrace | None) -> RecallResult:
    """The recall, told to `trace` stage by stage when the caller asked for one."""
    if trace is None:
        return engine.recaller.recall(req)
    return engine.recaller.recall(req, trace)


def _traced(out: dict[str, Any], trace: RecallTrace | None) -> dict[str, Any]:
    if trace is not None:
        out["trace"] = trace.finish()
    return out


def _mark_declared(
    engine: Engine, agent_id: str, rows: list[Candidate], messages: list[dict[str, Any]]
) -> None:
    """issue 32 hook: each message the declared roles of its row (`replaces`, `replaced_by`,
    `contradicts`; retrieval/supersession.py), added after the message's own keys."""
    marks = engine.recaller.supersession.marks(agent_id, [(r.kind, r.id) for r in rows])
    for row, msg in zip(rows, messages, strict=True):
        msg.update(marks.get((row.kind, row.id), {}))


def _recall_with_context(engine: Engine, a: RecallWithContextArgs) -> dict[str, Any]:
    entries = a.external_context
    mode = engine.settings.external_context_mode
    issues = ctx.field_issues(entries) if mode != "off" else []
    if issues and mode == "reject":
        listed = ", ".join(f"[{i['index']}] {' '.join(i['fields'])}" for i in issues)
        return {
            "ok": False,
            "messages": [],
            "error": f"external_context entries have fields that are not strings: {listed}",
        }
    try:
        span = span_of(a)
    except RangeError as exc:
        return _range_failure(exc)
    gate = _gate(engine, a)
    trace = _tracer(a)
    result = _run(engine, _request(engine, a, gate, ctx.exclusions(entries), span), trace)
    recalled = [msgs.message(r) for r in reversed(result.rows)]
    _mark_declared(engine, a.agent_id, list(reversed(result.rows)), recalled)
    conversation, other_roles = ctx.conversation(entries)
    merged = ctx.chronological(recalled + conversation)
    out = _envelope(engine, a, gate, result, merged)
    if other_roles:
        out["context_filter_only"] = {
            "roles": other_roles,
            "note": "Entries with these roles were used only to filter recalled memories; "
            "only user and assistant turns are merged.",
        }
    if issues and mode == "warn":
        out["context_field_issues"] = {"entries": issues, "note": ctx.issues_note(issues, entries)}
    return _traced(out, trace)


def _get_contents(engine: Engine, a: GetContentsArgs) -> dict[str, Any]:
    return msgs.get_contents(engine.db, a.agent_id, a.refs)


def _recall_description(settings: Settings) -> str:
    return (
        "Find the memories (and episodes) that answer `query` for one agent: hybrid "
        "vector + full-text + keyword search. `messages` is ordered worst to best: the "
        "LAST message is the best match. Rows below the quality gate are dropped, so "
        "the list may be empty. Messages longer than "
        f"{settings.recall_preview_chars} characters are cut to that preview with "
        "`content_truncated`, `content_len` and a `ref` to expand with get_contents; "
        f"`full_content=true` returns whole rows within a {msgs.FULL_CONTENT_BUDGET}-character "
        "budget spent from the best match back. `project_id`: omitted = all projects, '' = "
        "global pool, X = X plus global; `channel` X = X plus channel-global rows. "
        "`match_reason.signal` names the score the gate used. `gate_fallback: true` "
        "marks low-confidence lexical rescues. `advisory` appears while embeddings "
        "are degraded."
    )


_ABOUT_RECALL_WITH_CONTEXT = (
    "Recall, then merge your conversation turns (`external_context`: {role, "
    "content, name?, user_id?, timestamp?}) into one chronological list by the "
    "instant each timestamp names (any offset; offset-less = UTC); undated "
    "messages come first, so the last message is the newest. Recalled rows that "
    "repeat a turn's content are left out. Only user and assistant turns are "
    "merged."
)
_ABOUT_GET_CONTENTS = (
    "Expand preview refs (`mem:<id>`, `ep:<id>`) of one agent to their full text. "
    f"At most {msgs.CONTENTS_MAX_REFS} refs; items are returned whole until "
    f"{msgs.CONTENTS_BUDGET} characters, the rest listed in `deferred` to fetch "
    "next. Unknown or foreign refs are listed in `missing`."
)

# Each: name, position, description, arguments, access, handler, hints (ToolSpec's fields).
TOOLS = (
    ToolSpec("recall", 6, _recall_description, RecallArgs, Access.read(), _recall, READS),
    ToolSpec(
        "recall_with_context",
        7,
        _ABOUT_RECALL_WITH_CONTEXT,
        RecallWithContextArgs,
        Access.read(),
        _recall_with_context,
        READS,
    ),
    ToolSpec(
        "get_contents", 8, _ABOUT_GET_CONTENTS, GetContentsArgs, Access.read(), _get_contents, READS
    ),
)
