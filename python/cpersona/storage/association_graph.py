"""The declared associations in portability (storage/associations.py): one agent's graph read
for an export, carried onto the rows an import or merge wrote, counted and deleted with the
agent's data."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from cpersona.storage.associations import (
    DECLARED_BY,
    RECORD_KINDS,
    DeclScope,
    add_alias,
    add_mention,
    insert_entity,
    is_id,
    normalize,
    parse_ref,
    record_exists,
    resolve_entity,
    text_value,
    upsert_relation,
    utc_now,
)
from cpersona.storage.interface import Connection

# --------------------------------------------------------------------------------- portability


@dataclass
class Graph:
    """One agent's declarations keyed on the ids they had where they were read; the records
    of an export line each (`_type` entity / mention / relation)."""

    entities: dict[int, dict[str, Any]] = field(default_factory=dict)
    mentions: list[dict[str, Any]] = field(default_factory=list)
    relations: list[dict[str, Any]] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.entities or self.mentions or self.relations)

    def records(self) -> Iterator[dict[str, Any]]:
        """The export lines: entities (with aliases), then mentions, then relations."""
        for record in self.entities.values():
            yield {"_type": "entity", **record}
        for record in self.mentions:
            yield {"_type": "mention", **record}
        for record in self.relations:
            yield {"_type": "relation", **record}

    def add(self, record: dict[str, Any]) -> bool:
        """Take one export line back; False when it is not a declaration's."""
        kind = record.get("_type")
        body = {k: v for k, v in record.items() if k != "_type"}
        if kind == "entity" and is_id(body.get("id")):
            self.entities[int(body["id"])] = body
        elif kind == "mention":
            self.mentions.append(body)
        elif kind == "relation":
            self.relations.append(body)
        else:
            return False
        return True


_ENTITY_KEYS = ("id", "agent_id", "project_id", "channel", "name", "declared_by", "created_at")
_RELATION_KEYS = (
    "id",
    "agent_id",
    "project_id",
    "channel",
    "subject_kind",
    "subject_id",
    "predicate",
    "object_kind",
    "object_id",
    "anchor_ref",
    "declared_by",
    "declared_at",
)


def read_graph(conn: Connection, agent_id: str | None) -> Graph:
    """Every declaration of `agent_id` (None: of every agent)."""
    graph = Graph()
    where, params = ("e.agent_id = ?", [agent_id]) if agent_id is not None else ("TRUE", [])
    rows = conn.execute(
        f"SELECT {', '.join('e.' + k for k in _ENTITY_KEYS)} FROM entities e WHERE {where} "
        "ORDER BY e.id",
        params,
    ).fetchall()
    for row in rows:
        graph.entities[int(row[0])] = {**dict(zip(_ENTITY_KEYS, row, strict=True)), "aliases": []}
    for entity_id, alias in conn.execute(
        "SELECT a.entity_id, a.alias FROM entity_aliases a JOIN entities e ON e.id = a.entity_id "
        f"WHERE {where} ORDER BY a.entity_id, a.normalized",
        params,
    ).fetchall():
        graph.entities[int(entity_id)]["aliases"].append(alias)
    graph.mentions = [
        {"entity": int(r[0]), "ref": r[1], "declared_by": r[2], "created_at": r[3]}
        for r in conn.execute(
            "SELECT m.entity_id, m.ref, m.declared_by, m.created_at FROM entity_mentions m "
            f"JOIN entities e ON e.id = m.entity_id WHERE {where} ORDER BY m.entity_id, m.ref",
            params,
        ).fetchall()
    ]
    r_where = where.replace("e.", "r.")
    graph.relations = [
        dict(zip(_RELATION_KEYS, r, strict=True))
        for r in conn.execute(
            f"SELECT {', '.join('r.' + k for k in _RELATION_KEYS)} FROM relations r "
            f"WHERE {r_where} ORDER BY r.id",
            params,
        ).fetchall()
    ]
    return graph


@dataclass
class Carried:
    """What `carry` wrote, and how many declarations it could not."""

    entities: int = 0
    mentions: int = 0
    relations: int = 0
    dropped: int = 0

    def counts(self) -> dict[str, int]:
        return {"entities": self.entities, "mentions": self.mentions, "relations": self.relations}


def carry(
    conn: Connection,
    graph: Graph,
    ref_map: dict[str, str],
    *,
    agent_id: str | None = None,
    dry_run: bool = False,
) -> Carried:
    """Write `graph` with each record ref remapped through `ref_map` (the ref a record had
    where the graph was read -> its ref here), under `agent_id` when given. A mention or
    relation naming a record the map lacks is not written (its record did not come along);
    writing twice writes once (ON CONFLICT DO NOTHING). `dry_run` counts only."""
    out = Carried()
    entity_map: dict[int, int] = {}
    owners: dict[int, str] = {}
    now = utc_now()
    for old_id, record in graph.entities.items():
        name = text_value(record.get("name"))
        by = record.get("declared_by")
        owner = agent_id or record.get("agent_id")
        if name is None or by not in DECLARED_BY or not isinstance(owner, str) or not owner:
            out.dropped += 1
            continue
        scope = DeclScope(
            owner, str(record.get("project_id") or ""), str(record.get("channel") or "")
        )
        entity_id = resolve_entity(conn, scope, normalize(name), exact=True)
        if entity_id is None:
            stamp = record.get("created_at") or now
            entity_id = -old_id if dry_run else insert_entity(conn, scope, name, str(by), stamp)
        entity_map[old_id] = entity_id
        owners[old_id] = owner
        out.entities += 1
        aliases = record.get("aliases") or []
        for alias in aliases if isinstance(aliases, list) else []:
            text = text_value(alias)
            if text is not None and not dry_run:
                add_alias(conn, scope, entity_id, text)

    def here(owner: str, ref: object) -> tuple[str, int] | None:
        parsed = parse_ref(ref)
        if parsed is None:
            return None
        mapped = parse_ref(ref_map.get(f"{parsed[0]}:{parsed[1]}"))
        if mapped is None or (not dry_run and not record_exists(conn, owner, *mapped)):
            return None
        return mapped

    for record in graph.mentions:
        source = record.get("entity")
        entity_id = entity_map.get(source) if isinstance(source, int) else None
        owner = owners.get(source) if isinstance(source, int) else None
        ref = here(owner, record.get("ref")) if entity_id is not None and owner else None
        if entity_id is None or ref is None or record.get("declared_by") not in DECLARED_BY:
            out.dropped += 1
            continue
        if not dry_run:
            stamp = record.get("created_at") or now
            add_mention(conn, entity_id, f"{ref[0]}:{ref[1]}", str(record["declared_by"]), stamp)
        out.mentions += 1
    for record in graph.relations:
        owner = agent_id or record.get("agent_id")
        predicate = text_value(record.get("predicate"))
        by = record.get("declared_by")
        if not isinstance(owner, str) or not owner or predicate is None or by not in DECLARED_BY:
            out.dropped += 1
            continue
        ends: list[tuple[str, int] | None] = []
        for kind, end in (
            (record.get("subject_kind"), record.get("subject_id")),
            (record.get("object_kind"), record.get("object_id")),
        ):
            if kind == "entity" and is_id(end) and end in entity_map:
                ends.append(("entity", entity_map[end]))
            elif kind in RECORD_KINDS and is_id(end):
                ends.append(here(owner, f"{kind}:{end}"))
            else:
                ends.append(None)
        anchor_in = record.get("anchor_ref") or ""
        anchor = here(owner, anchor_in) if anchor_in else ("", 0)
        subject, obj = ends
        if subject is None or obj is None or anchor is None:
            out.dropped += 1
            continue
        if not dry_run:
            key = (
                owner,
                str(record.get("project_id") or ""),
                str(record.get("channel") or ""),
                subject[0],
                subject[1],
                normalize(predicate),
                obj[0],
                obj[1],
                f"{anchor[0]}:{anchor[1]}" if anchor_in else "",
            )
            upsert_relation(conn, key, str(by), str(record.get("declared_at") or now))
        out.relations += 1
    return out


def count_agent(conn: Connection, agent_id: str | None) -> dict[str, int]:
    """How many entities, mentions and relations `agent_id` (None: every agent) declares."""
    graph = read_graph(conn, agent_id)
    return {
        "entities": len(graph.entities),
        "mentions": len(graph.mentions),
        "relations": len(graph.relations),
    }


def delete_agent(conn: Connection, agent_id: str) -> dict[str, int]:
    """Delete every declaration of `agent_id` (entities take their aliases and mentions with
    them by trigger; relations are filed under the agent)."""
    counts = count_agent(conn, agent_id)
    conn.execute(
        "DELETE FROM entity_mentions WHERE entity_id IN (SELECT id FROM entities "
        "WHERE agent_id = ?)",
        (agent_id,),
    )
    conn.execute(
        "DELETE FROM entity_aliases WHERE entity_id IN (SELECT id FROM entities "
        "WHERE agent_id = ?)",
        (agent_id,),
    )
    conn.execute("DELETE FROM relations WHERE agent_id = ?", (agent_id,))
    conn.execute("DELETE FROM entities WHERE agent_id = ?", (agent_id,))
    return counts
