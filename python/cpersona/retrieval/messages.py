"""Recall messages (§3.2), the preview tier and the full-content budget (§14), get_contents."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from cpersona.retrieval.scoring import signal_of
from cpersona.storage import Store
from cpersona.storage import episodes as episode_sql
from cpersona.storage import memories as memory_sql

if TYPE_CHECKING:
    from cpersona.retrieval.candidates import Candidate

#: Characters `full_content=true` returns whole, from the best message backwards.
FULL_CONTENT_BUDGET = 200_000
#: get_contents: refs per call and characters per batch.
CONTENTS_MAX_REFS = 20
CONTENTS_BUDGET = 40_000


def message(row: Candidate) -> dict[str, Any]:
    """A recall message, keys in the spec's order; internal scores never leak."""
    out: dict[str, Any] = {"content": row.content}
    if row.id > 0:
        out["ref"] = f"{row.kind}:{row.id}"
    if row.source is not None:
        out["source"] = row.source
    if row.timestamp and not row.is_profile:
        out["timestamp"] = row.timestamp
    if row.kind == "mem" and row.msg_id:
        out["id"] = row.msg_id
    if row.confidence_detail is not None:
        out["confidence"] = row.confidence_detail
    reason = match_reason(row)
    if reason is not None:
        out["match_reason"] = reason
    return out


def match_reason(row: Candidate) -> dict[str, Any] | None:
    sig = signal_of(row)
    if sig is None:
        return None
    out: dict[str, Any] = {"signal": sig, "score": getattr(row, sig)}
    for key in ("cosine", "rrf", "rsf"):
        value = getattr(row, key)
        if value is not None:
            out[key] = value
    if row.penalty < 1.0 and row.cosine is not None:
        # The cosine as matched, before the episode-boundary penalty lowered it: what tells an
        # agent whether memory holds an answer at all (docs/quality.md, "Nothing relevant").
        out["relevance"] = row.cosine / row.penalty
    return out


def apply_preview(messages: list[dict[str, Any]], cap: int) -> None:
    """Cut every message that has a `ref` and is longer than `cap` to a pure prefix."""
    if cap <= 0:
        return
    for msg in messages:
        _trim(msg, cap)


def _trim(msg: dict[str, Any], cap: int) -> None:
    content = msg.get("content")
    if "ref" in msg and isinstance(content, str) and len(content) > cap:
        msg["content_len"] = len(content)
        msg["content"] = content[:cap]
        msg["content_truncated"] = True


def apply_full_content_budget(messages: list[dict[str, Any]], cap: int) -> bool:
    """Spend the 200,000-character budget from the last message back; True if it ran out."""
    if cap <= 0:
        return False
    used = 0
    over = False
    for msg in reversed(messages):
        content = msg.get("content")
        if not isinstance(content, str):
            continue
        if not over:
            if used > 0 and used + len(content) > FULL_CONTENT_BUDGET:
                over = True
            else:
                used += len(content)
                continue
        _trim(msg, cap)
        used += len(msg["content"])
    return over


def get_contents(db: Store, agent_id: str, refs: list[Any]) -> dict[str, Any]:
    """Expand `mem:<id>` / `ep:<id>` refs of one agent under the 40,000-character budget."""
    if not agent_id:
        return {"ok": False, "error": "agent_id is required"}
    if not isinstance(refs, list) or not refs:
        return {
            "ok": False,
            "error": "refs must be a non-empty list of 'mem:<id>' / 'ep:<id>' strings",
        }
    if len(refs) > CONTENTS_MAX_REFS:
        return {
            "ok": False,
            "error": f"too many refs ({len(refs)}; max {CONTENTS_MAX_REFS}) — split the fetch",
        }
    items: list[dict[str, Any]] = []
    missing: list[str] = []
    used = 0
    for n, ref in enumerate(refs):
        item = _resolve(db, agent_id, ref)
        if item is None:
            missing.append(str(ref))
            continue
        cost = _cost(item)
        if items and used + cost > CONTENTS_BUDGET:
            return {
                "items": items,
                "missing": missing,
                "count": len(items),
                "deferred": [str(r) for r in refs[n:]],
                "budget_chars": CONTENTS_BUDGET,
            }
        items.append(item)
        used += cost
    return {"items": items, "missing": missing, "count": len(items)}


def _resolve(db: Store, agent_id: str, ref: Any) -> dict[str, Any] | None:
    if not isinstance(ref, str) or ":" not in ref:
        return None
    kind, raw = ref.split(":", 1)
    try:
        row_id = int(raw)
    except ValueError:
        return None
    if row_id <= 0 or kind not in ("mem", "ep"):
        return None
    if kind == "mem":
        m = memory_sql.fetch(db, row_id)
        if m is None or m.agent_id != agent_id:
            return None
        item: dict[str, Any] = {"ref": ref, "content": m.content}
        try:
            source = json.loads(m.source) if m.source else {}
        except ValueError:
            source = {}
        if source:
            item["source"] = source
        if m.timestamp:
            item["timestamp"] = m.timestamp
        if m.msg_id:
            item["id"] = m.msg_id
        return item
    e = episode_sql.fetch(db, row_id)
    if e is None or e.agent_id != agent_id:
        return None
    return {
        "ref": ref,
        "content": "[Episode] " + e.summary,
        "source": {"System": "episode"},
        "timestamp": e.start_time or e.created_at or "",
        "resolved": e.resolved,
    }


def _cost(item: dict[str, Any]) -> int:
    total = 0
    for value in item.values():
        if isinstance(value, str):
            total += len(value)
        else:
            total += len(json.dumps(value, ensure_ascii=False))
    return total
