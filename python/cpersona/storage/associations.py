"""SQL of the declared associations (CPersona 2.6's associative memory): the `entities`,
`entity_aliases`, `entity_mentions` and `relations` tables, on the same schema as 2.6.14, so
a 2.6 store's declarations are read as they are and what cpersona declares is read by 2.6.

The server records what an agent declares and infers nothing: no entity is extracted from
text and no relation derived from others. Normalization (NFKC, case-folded, whitespace
collapsed) is the only processing, and it is what lookups compare; a predicate is stored
normalized. Two rules the schema cannot hold are held here, as 2.6 holds them: one normalized
alias names at most one entity a reader sees, and a record a declaration names must be a
record of the declaring agent (the tables have no foreign keys; the delete triggers take a
record's declarations with it).

A malformed item is reported in `dropped` and skipped, never a reason to refuse the rest.

Here: declare, retract, traverse. Beside it: the tables' DDL (association_schema.py), the
record -> record roles recall reads (association_links.py) and the graph of portability
(association_graph.py).
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from cpersona.models import ProjectFilter
from cpersona.storage.error_kinds import translating
from cpersona.storage.filters import project_where
from cpersona.storage.interface import Connection, Store

# Bounds on one call, as 2.6.14's: items past them are reported in `dropped`.
MAX_ITEMS = 64
MAX_ALIASES = 32
MAX_TEXT = 256
TRAVERSE_MAX_HOPS = 5
TRAVERSE_MAX_LIMIT = 100
#: Entities one neighbourhood expands (2.6.14's server policy, above TRAVERSE_MAX_LIMIT).
NEIGHBOURHOOD_MAX_ENTITIES = 256

RECORD_KINDS = ("mem", "ep")
DECLARED_BY = ("agent", "operator")
#: The record -> record role vocabulary 2.6 reads (subject is the newer record).
ROLES = ("supports", "supersedes", "corrects", "qualifies", "contradicts", "temporal_predecessor")
#: The roles that make the object an older version of the subject (recall shows the subject).
REPLACING = ("supersedes", "corrects")

_WHITESPACE = re.compile(r"\s+")
_REF = re.compile(r"^(mem|ep):(\d+)$")
TABLE_OF = {"mem": "memories", "ep": "episodes"}
_INT64 = 2**63 - 1

# --------------------------------------------------------------------------------- values


def normalize(text: str) -> str:
    """NFKC, case-folded, whitespace collapsed to one space, trimmed (2.6's comparison)."""
    return _WHITESPACE.sub(" ", unicodedata.normalize("NFKC", text).casefold()).strip()


def parse_ref(ref: object) -> tuple[str, int] | None:
    """`mem:<id>` / `ep:<id>` -> (kind, id); anything else (or an id past int64) -> None."""
    if not isinstance(ref, str):
        return None
    m = _REF.match(ref.strip())
    if not m:
        return None
    row_id = int(m.group(2))
    return (m.group(1), row_id) if row_id <= _INT64 else None


def is_id(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and -_INT64 <= value <= _INT64


def text_value(value: object) -> str | None:
    if not isinstance(value, str):
        return None
    value = value.strip()
    return value if value and len(value) <= MAX_TEXT else None


def utc_now() -> str:
    return datetime.now(UTC).isoformat()


@dataclass(frozen=True, slots=True)
class DeclScope:
    """Where a declaration is filed: the agent, and the project and channel of the call."""

    agent_id: str
    project_id: str = ""
    channel: str = ""

    def visible(self) -> list[tuple[str, str]]:
        """The scopes whose entities a reader of this scope sees, most specific first."""
        projects = [self.project_id, ""] if self.project_id else [""]
        channels = [self.channel, ""] if self.channel else [""]
        return [(p, c) for p in projects for c in channels]


def _read_scope(
    alias: str, agent_id: str, project: ProjectFilter, channel: str
) -> tuple[str, list[object]]:
    """The rows of `alias` a read of (agent, project, channel) sees, recall's semantics."""
    pw, pp = project_where(project, f"{alias}.project_id")
    parts = [f"{alias}.agent_id = ?", pw]
    params: list[object] = [agent_id, *pp]
    if channel:
        parts.append(f"{alias}.channel IN (?, '')")
        params.append(channel)
    return " AND ".join(parts), params


# --------------------------------------------------------------------------------- declaring


def record_exists(conn: Connection, agent_id: str, kind: str, row_id: int) -> bool:
    sql = f"SELECT 1 FROM {TABLE_OF[kind]} WHERE id = ? AND agent_id = ?"
    return conn.execute(sql, (row_id, agent_id)).fetchone() is not None


def resolve_entity(
    conn: Connection, scope: DeclScope, normalized: str, *, exact: bool = False
) -> int | None:
    scopes = scope.visible()
    for project_id, channel in scopes[:1] if exact else scopes:
        row = conn.execute(
            "SELECT e.id FROM entities e WHERE e.agent_id = ? AND e.project_id = ? "
            "AND e.channel = ? AND (e.normalized = ? OR EXISTS (SELECT 1 FROM entity_aliases a "
            "WHERE a.entity_id = e.id AND a.normalized = ?)) ORDER BY e.id LIMIT 1",
            (scope.agent_id, project_id, channel, normalized, normalized),
        ).fetchone()
        if row is not None:
            return int(row[0])
    return None


def insert_entity(
    conn: Connection, scope: DeclScope, name: str, declared_by: str, stamp: str
) -> int:
    rows = conn.execute(
        "INSERT INTO entities (agent_id, project_id, channel, name, normalized, declared_by, "
        "created_at) VALUES (?, ?, ?, ?, ?, ?, ?) RETURNING id",
        (
            scope.agent_id,
            scope.project_id,
            scope.channel,
            name,
            normalize(name),
            declared_by,
            stamp,
        ),
    ).fetchall()
    return int(rows[0][0])


def _register_entity(
    conn: Connection, scope: DeclScope, name: str, declared_by: str, now: str, exact: bool
) -> tuple[int, bool]:
    # An entity declared with aliases gets one of its own scope (`exact`): entity_aliases has no
    # scope columns, so an alias added to a wider scope's entity would be read everywhere.
    existing = resolve_entity(conn, scope, normalize(name), exact=exact)
    if existing is not None:
        return existing, False
    return insert_entity(conn, scope, name, declared_by, now), True


def _alias_refusal(conn: Connection, scope: DeclScope, entity_id: int, alias: str) -> str | None:
    normalized = normalize(alias)
    if not normalized:
        return "empty after normalization"
    owner = resolve_entity(conn, scope, normalized)
    if owner is not None and owner != entity_id:
        return "already names another entity in this scope"
    return None


def add_alias(conn: Connection, scope: DeclScope, entity_id: int, alias: str) -> str | None:
    reason = _alias_refusal(conn, scope, entity_id, alias)
    if reason is None:
        conn.execute(
            "INSERT INTO entity_aliases (entity_id, alias, normalized) VALUES (?, ?, ?) "
            "ON CONFLICT DO NOTHING",
            (entity_id, alias, normalize(alias)),
        )
    return reason


def add_mention(conn: Connection, entity_id: int, ref: str, declared_by: str, now: str) -> None:
    conn.execute(
        "INSERT INTO entity_mentions (entity_id, ref, declared_by, created_at) "
        "VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING",
        (entity_id, ref, declared_by, now),
    )


def _endpoint(
    conn: Connection, scope: DeclScope, value: object, declared_by: str, now: str
) -> tuple[str, int] | str:
    """A relation's end: a record of this agent, or an entity name (registered if new); or
    why it is neither."""
    parsed = parse_ref(value)
    if parsed is not None:
        if not record_exists(conn, scope.agent_id, *parsed):
            return f"{str(value).strip()} is not a record of this agent"
        return parsed
    if isinstance(value, str) and re.match(r"^(mem|ep):\d+$", value.strip()):
        return f"{value.strip()} is not a record of this agent"
    name = text_value(value)
    if name is None:
        return "endpoint must be an entity name or a record ref"
    return "entity", _register_entity(conn, scope, name, declared_by, now, False)[0]


def upsert_relation(conn: Connection, key: tuple[object, ...], declared_by: str, now: str) -> int:
    conn.execute(
        "INSERT INTO relations (agent_id, project_id, channel, subject_kind, subject_id, "
        "predicate, object_kind, object_id, anchor_ref, declared_by, declared_at) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
        (*key, declared_by, now),
    )
    row = conn.execute(
        "SELECT id FROM relations WHERE agent_id = ? AND project_id = ? AND channel = ? "
        "AND subject_kind = ? AND subject_id = ? AND predicate = ? AND object_kind = ? "
        "AND object_id = ? AND anchor_ref = ?",
        key,
    ).fetchone()
    return int(row[0])


@translating
def declare(
    db: Store,
    scope: DeclScope,
    associations: dict[str, Any],
    anchor_ref: str = "",
    declared_by: str = "agent",
) -> dict[str, Any]:
    """Record one declaration in one transaction: `{entities: [{id, name, created}],
    mentions, relations: [ids], dropped: [{item, reason}]}` (2.6.14's answer)."""
    report: dict[str, Any] = {"entities": [], "mentions": 0, "relations": [], "dropped": []}
    dropped: list[dict[str, str]] = report["dropped"]
    entities = associations.get("entities", [])
    relations = associations.get("relations", [])
    if not isinstance(entities, list):
        dropped.append({"item": "entities", "reason": "must be a list"})
        entities = []
    if not isinstance(relations, list):
        dropped.append({"item": "relations", "reason": "must be a list"})
        relations = []
    now = utc_now()
    with db.atomic(exclusive=False) as conn:
        anchor = anchor_ref.strip()
        if anchor:
            parsed = parse_ref(anchor)
            if parsed is None or not record_exists(conn, scope.agent_id, *parsed):
                reason = f"{anchor} is not a record of this agent"
                dropped.append({"item": "anchor_ref", "reason": reason})
                anchor = ""
            else:
                anchor = f"{parsed[0]}:{parsed[1]}"  # one spelling: the triggers build it so
        for index, item in enumerate(entities):
            if index >= MAX_ITEMS:
                dropped.append(
                    {"item": f"entities[{index}]", "reason": f"beyond the {MAX_ITEMS}-item bound"}
                )
                continue
            name = text_value(item.get("name")) if isinstance(item, dict) else None
            if name is None:
                dropped.append(
                    {"item": f"entities[{index}]", "reason": "name must be a nonempty string"}
                )
                continue
            aliases = item.get("aliases", [])
            if not isinstance(aliases, list):
                dropped.append({"item": f"entities[{index}].aliases", "reason": "must be a list"})
                aliases = []
            exact = any(text_value(a) is not None for a in aliases[:MAX_ALIASES])
            entity_id, created = _register_entity(conn, scope, name, declared_by, now, exact)
            for a_index, alias in enumerate(aliases):
                label = f"entities[{index}].aliases[{a_index}]"
                if a_index >= MAX_ALIASES:
                    bound = f"beyond the {MAX_ALIASES}-alias bound"
                    dropped.append({"item": label, "reason": bound})
                    continue
                text = text_value(alias)
                why = (
                    "must be a nonempty string"
                    if text is None
                    else add_alias(conn, scope, entity_id, text)
                )
                if why:
                    dropped.append({"item": label, "reason": why})
            if anchor:
                add_mention(conn, entity_id, anchor, declared_by, now)
                report["mentions"] += 1
            report["entities"].append({"id": entity_id, "name": name, "created": created})
        for index, item in enumerate(relations):
            label = f"relations[{index}]"
            if index >= MAX_ITEMS:
                dropped.append({"item": label, "reason": f"beyond the {MAX_ITEMS}-item bound"})
                continue
            if not isinstance(item, dict):
                dropped.append({"item": label, "reason": "must be an object"})
                continue
            predicate = text_value(item.get("predicate"))
            if predicate is None or not normalize(predicate):
                dropped.append({"item": label, "reason": "predicate must be a nonempty string"})
                continue
            subject = _endpoint(conn, scope, item.get("subject"), declared_by, now)
            if isinstance(subject, str):
                dropped.append({"item": f"{label}.subject", "reason": subject})
                continue
            obj = _endpoint(conn, scope, item.get("object"), declared_by, now)
            if isinstance(obj, str):
                dropped.append({"item": f"{label}.object", "reason": obj})
                continue
            key = (
                scope.agent_id,
                scope.project_id,
                scope.channel,
                subject[0],
                subject[1],
                normalize(predicate),
                obj[0],
                obj[1],
                anchor,
            )
            report["relations"].append(upsert_relation(conn, key, declared_by, now))
    return report


def _bounded(items: object, name: str, dropped: list[dict[str, str]]) -> list[Any]:
    if items is None:
        return []
    if not isinstance(items, list):
        dropped.append({"item": f"retract.{name}", "reason": "must be a list"})
        return []
    for index in range(MAX_ITEMS, len(items)):
        bound = f"beyond the {MAX_ITEMS}-item bound"
        dropped.append({"item": f"retract.{name}[{index}]", "reason": bound})
    return items[:MAX_ITEMS]


@translating
def retract(
    db: Store, agent_id: str, relations: object = None, mentions: object = None
) -> dict[str, Any]:
    """Remove this agent's relations by id and mentions by {entity, ref}; another agent's ids
    are left alone. `{relations: n, mentions: n, dropped: [...]}`."""
    report: dict[str, Any] = {"relations": 0, "mentions": 0, "dropped": []}
    dropped: list[dict[str, str]] = report["dropped"]
    rel_items = _bounded(relations, "relations", dropped)
    mention_items = _bounded(mentions, "mentions", dropped)
    with db.atomic(exclusive=False) as conn:
        for index, relation_id in enumerate(rel_items):
            if not is_id(relation_id):
                label = f"retract.relations[{index}]"
                dropped.append({"item": label, "reason": "must be an integer id"})
                continue
            cur = conn.execute(
                "DELETE FROM relations WHERE id = ? AND agent_id = ?", (relation_id, agent_id)
            )
            report["relations"] += max(cur.rowcount, 0)
        for index, item in enumerate(mention_items):
            entity_id = item.get("entity") if isinstance(item, dict) else None
            parsed = parse_ref(item.get("ref")) if isinstance(item, dict) else None
            if not is_id(entity_id) or parsed is None:
                label = f"retract.mentions[{index}]"
                dropped.append(
                    {"item": label, "reason": "needs an integer entity and a record ref"}
                )
                continue
            cur = conn.execute(
                "DELETE FROM entity_mentions WHERE entity_id = ? AND ref = ? "
                "AND entity_id IN (SELECT id FROM entities WHERE agent_id = ?)",
                (entity_id, f"{parsed[0]}:{parsed[1]}", agent_id),
            )
            report["mentions"] += max(cur.rowcount, 0)
    # Items past the bound are listed after the ones checked, as 2.6.14 lists them.
    dropped.sort(key=lambda d: "beyond" in d["reason"])
    return report


# --------------------------------------------------------------------------------- traverse


@dataclass(frozen=True, slots=True)
class ReadScope:
    """What a read sees: the agent, recall's project and channel axes, a source-id prefix."""

    agent_id: str
    project: ProjectFilter = field(default_factory=lambda: ProjectFilter(None))
    channel: str = ""
    source_id: str = ""


Edge = tuple[int, int, str, str, str, str]  # subject, object, predicate, at, anchor, by


def _neighbourhood(
    conn: Connection, scope: ReadScope, starts: list[int], max_hops: int
) -> tuple[dict[int, Edge], dict[int, int], dict[int, int]]:
    """Breadth first over entity -> entity relations in scope, either direction: the edges
    touching expanded entities, each entity's hops, each edge's recency (0 = newest)."""
    r_where, r_params = _read_scope("r", scope.agent_id, scope.project, scope.channel)
    s_where, s_params = _read_scope("s", scope.agent_id, scope.project, scope.channel)
    o_where, o_params = _read_scope("o", scope.agent_id, scope.project, scope.channel)
    edges: dict[int, Edge] = {}
    distance = dict.fromkeys(starts, 0)
    frontier = sorted(distance)
    for hop in range(max_hops + 1):
        if not frontier:
            break
        reached: dict[int, tuple[str, int]] = {}
        for offset in range(0, len(frontier), 250):
            batch = frontier[offset : offset + 250]
            marks = ",".join("?" for _ in batch)
            rows = conn.execute(
                "SELECT r.id, r.subject_id, r.object_id, r.predicate, r.declared_at, "
                "r.anchor_ref, r.declared_by FROM relations r "
                "JOIN entities s ON s.id = r.subject_id JOIN entities o ON o.id = r.object_id "
                f"WHERE {r_where} AND {s_where} AND {o_where} "
                "AND r.subject_kind = 'entity' AND r.object_kind = 'entity' "
                f"AND (r.subject_id IN ({marks}) OR r.object_id IN ({marks}))",
                (*r_params, *s_params, *o_params, *batch, *batch),
            ).fetchall()
            for rel_id, subject, obj, predicate, at, anchor, by in rows:
                edges[int(rel_id)] = (int(subject), int(obj), predicate, at, anchor, by)
                for end in (int(subject), int(obj)):
                    mark = (at, -int(rel_id))
                    if end not in distance and (end not in reached or mark > reached[end]):
                        reached[end] = mark
        if hop == max_hops:
            break  # the edges of the entities at the bound are known: they say it bound
        room = NEIGHBOURHOOD_MAX_ENTITIES - len(distance)
        if len(reached) > room:
            newest = sorted(reached, key=lambda e: (reached[e], -e), reverse=True)
            for e in newest[: max(room, 0)]:
                distance[e] = hop + 1
            break
        for e in reached:
            distance[e] = hop + 1
        frontier = sorted(reached)
    newest_first = sorted(edges, key=lambda r: (edges[r][3], -r), reverse=True)
    return edges, distance, {rel: pos for pos, rel in enumerate(newest_first)}


def _mentioning(
    conn: Connection, db: Store, scope: ReadScope, entity_id: int, limit: int
) -> tuple[list[str], int]:
    """The refs of the readable records mentioning `entity_id` (lowest id first, at most
    `limit`) and how many there are."""
    m_where, m_params = _read_scope("t", scope.agent_id, scope.project, scope.channel)
    src, src_params = "", []
    if scope.source_id:
        src = f" AND substr({db.ops.source_id('t')}, 1, ?) = ?"
        src_params = [len(scope.source_id), scope.source_id]
    found: list[tuple[int, str]] = []
    total = 0
    # Episodes have no source: a source-filtered read sees them only with a channel (recall's).
    kinds = [("mem", "memories", src, src_params)]
    if not scope.source_id or scope.channel:
        kinds.append(("ep", "episodes", "", []))
    for kind, table, extra, extra_params in kinds:
        # The record's id read out of the ref: a rowid lookup per mention, not a scan.
        body = (
            f"FROM entity_mentions m JOIN {table} t "
            # CASE: no other kind's ref is ever cast (PostgreSQL would refuse ':19').
            f"ON t.id = CAST(CASE WHEN m.ref LIKE '{kind}:%' "
            f"THEN substr(m.ref, {len(kind) + 2}) END AS BIGINT) "
            f"WHERE m.entity_id = ? AND m.ref LIKE '{kind}:%' AND {m_where}{extra}"
        )
        params = (entity_id, *m_params, *extra_params)
        ids = conn.execute(f"SELECT t.id {body} ORDER BY t.id LIMIT ?", (*params, limit)).fetchall()
        found += [(int(r[0]), f"{kind}:{r[0]}") for r in ids]
        count = len(ids)
        if count >= limit:
            count = int(conn.execute(f"SELECT COUNT(*) {body}", params).fetchone()[0])
        total += count
    found.sort()
    return [ref for _, ref in found[:limit]], total


@translating
def traverse(db: Store, scope: ReadScope, entity: str, max_hops: int, limit: int) -> dict[str, Any]:
    """The neighbourhood of a declared entity, 2.6.14's answer and orderings: entities by
    hops, then by the most recent relation that reached them, then id; relations newest
    first; mentions by record id."""
    max_hops = max(0, min(max_hops, TRAVERSE_MAX_HOPS))
    limit = max(1, min(limit, TRAVERSE_MAX_LIMIT))
    out: dict[str, Any] = {
        "entity": entity,
        "max_hops": max_hops,
        "limit": limit,
        "entities": [],
        "relations": [],
    }
    normalized = normalize(entity)
    if not normalized:
        out["reason"] = "no_such_entity"
        return out
    e_where, e_params = _read_scope("e", scope.agent_id, scope.project, scope.channel)
    with db.snapshot() as conn:
        starts = [
            int(r[0])
            for r in conn.execute(
                f"SELECT e.id FROM entities e WHERE {e_where} AND (e.normalized = ? OR EXISTS "
                "(SELECT 1 FROM entity_aliases a WHERE a.entity_id = e.id AND a.normalized = ?)) "
                "ORDER BY e.id",
                (*e_params, normalized, normalized),
            ).fetchall()
        ]
        if not starts:
            out["reason"] = "no_such_entity"
            return out
        edges, distance, recency = _neighbourhood(conn, scope, starts, max_hops)
        reached_by: dict[int, int] = {}
        for rel_id, (subject, obj, *_) in edges.items():
            for near, far in ((subject, obj), (obj, subject)):
                if near in distance and far in distance and distance[far] == distance[near] + 1:
                    reached_by[far] = min(reached_by.get(far, recency[rel_id]), recency[rel_id])
        order = sorted(distance, key=lambda e: (distance[e], reached_by.get(e, -1), e))
        kept = order[:limit]
        marks = ",".join("?" for _ in kept)
        names = {
            int(r[0]): r[1]
            for r in conn.execute(f"SELECT id, name FROM entities WHERE id IN ({marks})", kept)
        }
        aliases: dict[int, list[str]] = {}
        for entity_id, alias in conn.execute(
            f"SELECT entity_id, alias FROM entity_aliases WHERE entity_id IN ({marks}) "
            "ORDER BY entity_id, normalized",
            kept,
        ).fetchall():
            aliases.setdefault(int(entity_id), []).append(alias)
        mentions_cut = False
        for entity_id in kept:
            entry: dict[str, Any] = {
                "id": entity_id,
                "name": names[entity_id],
                "hops": distance[entity_id],
            }
            if aliases.get(entity_id):
                entry["aliases"] = aliases[entity_id]
            refs, total = _mentioning(conn, db, scope, entity_id, limit)
            if refs:
                entry["mentions"] = refs
            if total > len(refs):
                entry["mentions_omitted"] = total - len(refs)
                mentions_cut = True
            out["entities"].append(entry)
    kept_set = set(kept)
    for rel_id in sorted(edges, key=lambda r: recency[r]):
        subject, obj, predicate, at, anchor, by = edges[rel_id]
        if subject in kept_set and obj in kept_set:
            relation: dict[str, Any] = {
                "id": rel_id,
                "subject": subject,
                "predicate": predicate,
                "object": obj,
                "declared_by": by,
                "declared_at": at,
            }
            if anchor:
                relation["anchor_ref"] = anchor
            out["relations"].append(relation)
    omitted = []
    if any(end not in distance for s, o, *_ in edges.values() for end in (s, o)):
        omitted.append("max_hops")
    if len(order) > len(kept) or mentions_cut:
        omitted.append("limit")
    if len(order) > len(kept):
        out["entities_omitted"] = len(order) - len(kept)
    if omitted:
        out["bounds"] = {"omitted": omitted}
    return out
