"""Retrieval tools: recall, recall_with_context, get_contents."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from cpersona.config import Settings
from cpersona.models import ProjectFilter
from cpersona.operating_context import Gate
from cpersona.retrieval import context as ctx
from cpersona.retrieval import messages as msgs
from cpersona.server.registry import Annotations, ToolSpec
from cpersona.server.tools.memory import RANGE_DEFAULTS, SESSION_KEY, SINCE, STR, UNTIL, span_of
from cpersona.session import bucket
from cpersona.timerange import RangeError, TimeRange

if TYPE_CHECKING:
    from cpersona.engine import Engine
    from cpersona.retrieval.pipeline import RecallRequest, RecallResult

LIMIT = {"type": "integer", "minimum": 0, "maximum": 100, "default": 10}


def _request(
    engine: Engine, a: dict[str, Any], gate: Gate, exclude: list[str], span: TimeRange | None
) -> RecallRequest:
    # The pipeline (and numpy) loads with the first recall, not with tools/list.
    from cpersona.retrieval.pipeline import RecallRequest

    return RecallRequest(
        agent_id=a["agent_id"],
        query=a["query"],
        limit=a["limit"],
        deep=a["deep"],
        channel=a["channel"],
        exclude_contents=tuple(exclude),
        project=ProjectFilter(gate.project_id),
        source_id=a["source_id"],
        session_key=a["session_key"],
        # While the caller's bucket is paused, recall-count bookkeeping is skipped (§10.3).
        paused=engine.pause.active(a["session_key"]) is not None,
        span=span,
    )


def _range_failure(exc: RangeError) -> dict[str, Any]:
    # Refusals keep the documented collection key present (surface.md §1.3).
    return {"ok": False, "messages": [], "error": str(exc)}


def _gate(engine: Engine, a: dict[str, Any]) -> Gate:
    # Reads never refuse at the OC gate (surface.md §6.6); they only resolve and warn.
    gate: Gate = engine.operating_context.gate(a["project_id"], a["agent_id"], write=False)
    return gate


def _envelope(
    engine: Engine,
    a: dict[str, Any],
    gate: Gate,
    result: RecallResult,
    messages: list[dict[str, Any]],
) -> dict[str, Any]:
    out: dict[str, Any] = {"messages": messages}
    if result.gate_fallback:
        out["gate_fallback"] = True
    if result.advisory is not None:
        out["advisory"] = result.advisory
    notice = engine.updates.notice(bucket(a["session_key"]).name)
    if notice is not None:
        out["update"] = notice
    cap = engine.settings.recall_preview_chars
    if a["full_content"]:
        if msgs.apply_full_content_budget(messages, cap):
            out["full_content_budget_chars"] = msgs.FULL_CONTENT_BUDGET
    else:
        msgs.apply_preview(messages, cap)
    out.update(gate.extra)
    return out


def _recall(engine: Engine, a: dict[str, Any]) -> dict[str, Any]:
    try:
        span = span_of(a)
    except RangeError as exc:
        return _range_failure(exc)
    gate = _gate(engine, a)
    result = engine.recaller.recall(_request(engine, a, gate, list(a["exclude_contents"]), span))
    messages = [msgs.message(r) for r in reversed(result.rows)]
    return _envelope(engine, a, gate, result, messages)


def _recall_with_context(engine: Engine, a: dict[str, Any]) -> dict[str, Any]:
    entries = a["external_context"]
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
    result = engine.recaller.recall(_request(engine, a, gate, ctx.exclusions(entries), span))
    recalled = [msgs.message(r) for r in reversed(result.rows)]
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
    return out


def _get_contents(engine: Engine, a: dict[str, Any]) -> dict[str, Any]:
    return msgs.get_contents(engine.db, a["agent_id"], a["refs"])


def _recall_properties() -> dict[str, dict[str, Any]]:
    return {
        "agent_id": STR,
        "query": {"type": "string", "description": "What to remember; blank lists the newest."},
        "limit": LIMIT,
        "deep": {"type": "boolean", "description": "Relax the quality gate (halves it)."},
        "channel": STR,
        "exclude_contents": {"type": "array", "items": {"type": "string"}},
        "project_id": STR,
        "source_id": STR,
        "full_content": {"type": "boolean"},
        "session_key": SESSION_KEY,
        "since": SINCE,
        "until": UNTIL,
    }


def tools(settings: Settings) -> list[ToolSpec]:
    preview = settings.recall_preview_chars
    defaults = {"limit": 10, "project_id": None, **RANGE_DEFAULTS}
    context_props = _recall_properties()
    del context_props["exclude_contents"]
    context_props["external_context"] = {
        "type": "array",
        "items": {
            "type": "object",
            "properties": {"role": {}, "content": {}, "name": {}, "user_id": {}, "timestamp": {}},
        },
    }
    return [
        ToolSpec(
            name="recall",
            description=(
                "Find the memories (and episodes) that answer `query` for one agent: hybrid "
                "vector + full-text + keyword search. `messages` is ordered worst to best: the "
                "LAST message is the best match. Rows below the quality gate are dropped, so "
                "the list may be empty. Messages longer than "
                f"{preview} characters are cut to that preview with `content_truncated`, "
                "`content_len` and a `ref` to expand with get_contents; `full_content=true` "
                f"returns whole rows within a {msgs.FULL_CONTENT_BUDGET}-character budget "
                "spent from the best match back. `project_id`: omitted = all projects, '' = "
                "global pool, X = X plus global; `channel` X = X plus channel-global rows. "
                "`match_reason.signal` names the score the gate used. `gate_fallback: true` "
                "marks low-confidence lexical rescues. `advisory` appears while embeddings "
                "are degraded."
            ),
            properties=_recall_properties(),
            required=("agent_id", "query"),
            handler=_recall,
            annotations=Annotations(read_only=True),
            defaults=defaults,
        ),
        ToolSpec(
            name="recall_with_context",
            description=(
                "Recall, then merge your conversation turns (`external_context`: {role, "
                "content, name?, user_id?, timestamp?}) into one chronological list by the "
                "instant each timestamp names (any offset; offset-less = UTC); undated "
                "messages come first, so the last message is the newest. Recalled rows that "
                "repeat a turn's content are left out. Only user and assistant turns are "
                "merged."
            ),
            properties=context_props,
            required=("agent_id", "query"),
            handler=_recall_with_context,
            annotations=Annotations(read_only=True),
            defaults=defaults,
        ),
        ToolSpec(
            name="get_contents",
            description=(
                "Expand preview refs (`mem:<id>`, `ep:<id>`) of one agent to their full text. "
                f"At most {msgs.CONTENTS_MAX_REFS} refs; items are returned whole until "
                f"{msgs.CONTENTS_BUDGET} characters, the rest listed in `deferred` to fetch "
                "next. Unknown or foreign refs are listed in `missing`."
            ),
            properties={
                "agent_id": STR,
                "refs": {
                    "type": "array",
                    "items": {"type": "string"},
                    "maxItems": msgs.CONTENTS_MAX_REFS,
                },
            },
            required=("agent_id", "refs"),
            handler=_get_contents,
            annotations=Annotations(read_only=True),
        ),
    ]
