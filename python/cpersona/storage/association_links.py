"""The record -> record roles of the declared associations (storage/associations.py), as
recall's supersession step reads them: whether an agent declares any, whether a set of
records touches one, the links themselves, and where each record is filed."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from cpersona.storage.associations import TABLE_OF
from cpersona.storage.error_kinds import translating
from cpersona.storage.interface import Store
from cpersona.timerange import row_time

# --------------------------------------------------------------------------------- roles


@dataclass(frozen=True, slots=True)
class RoleLink:
    """A declared record -> record role: `subject` (the newer record) `role` `obj`, with the
    scope each record is filed in (None: the record is gone or not this agent's)."""

    subject: tuple[str, int]
    role: str
    obj: tuple[str, int]
    relation_id: int


@translating
def declares_roles(db: Store, agent_id: str, roles: Sequence[str]) -> bool:
    """Whether `agent_id` has any relation whose predicate is one of `roles` (one probe)."""
    marks = ",".join("?" for _ in roles)
    row = db.query_one(
        f"SELECT 1 FROM relations WHERE agent_id = ? AND predicate IN ({marks}) LIMIT 1",
        (agent_id, *roles),
    )
    return row is not None


def _role_rows(
    db: Store, agent_id: str, roles: Sequence[str], column: str, refs: Iterable[tuple[str, int]]
) -> list[RoleLink]:
    by_kind: dict[str, list[int]] = {}
    for kind, row_id in refs:
        by_kind.setdefault(kind, []).append(row_id)
    role_marks = ",".join("?" for _ in roles)
    out: list[RoleLink] = []
    for kind, ids in sorted(by_kind.items()):
        for offset in range(0, len(ids), 500):
            batch = ids[offset : offset + 500]
            marks = ",".join("?" for _ in batch)
            rows = db.query(
                "SELECT id, subject_kind, subject_id, predicate, object_kind, object_id "
                f"FROM relations WHERE agent_id = ? AND predicate IN ({role_marks}) "
                f"AND {column}_kind = ? AND {column}_id IN ({marks}) "
                "AND subject_kind IN ('mem', 'ep') AND object_kind IN ('mem', 'ep')",
                (agent_id, *roles, kind, *batch),
            )
            out += [RoleLink((r[1], int(r[2])), r[3], (r[4], int(r[5])), int(r[0])) for r in rows]
    return out


@translating
def touches_roles(
    db: Store, agent_id: str, refs: Iterable[tuple[str, int]], roles: Sequence[str]
) -> bool:
    """Whether any of `refs` is an end of one of this agent's relations of `roles` (one
    statement per kind of record: the common answer, no, costs that much and no more)."""
    by_kind: dict[str, list[int]] = {}
    for kind, row_id in dict.fromkeys(refs):
        by_kind.setdefault(kind, []).append(row_id)
    role_marks = ",".join("?" for _ in roles)
    for kind, ids in sorted(by_kind.items()):
        for offset in range(0, len(ids), 500):
            batch = ids[offset : offset + 500]
            marks = ",".join("?" for _ in batch)
            row = db.query_one(
                f"SELECT 1 FROM relations WHERE agent_id = ? AND predicate IN ({role_marks}) "
                f"AND ((object_kind = ? AND object_id IN ({marks})) "
                f"OR (subject_kind = ? AND subject_id IN ({marks}))) LIMIT 1",
                (agent_id, *roles, kind, *batch, kind, *batch),
            )
            if row is not None:
                return True
    return False


@translating
def role_links(
    db: Store,
    agent_id: str,
    refs: Iterable[tuple[str, int]],
    roles: Sequence[str],
    *,
    as_object: bool = True,
    as_subject: bool = False,
) -> list[RoleLink]:
    """The record -> record relations of `roles` whose object (and/or subject) is one of
    `refs`, this agent's only."""
    wanted = list(dict.fromkeys(refs))
    out: list[RoleLink] = []
    if as_object:
        out += _role_rows(db, agent_id, roles, "object", wanted)
    if as_subject:
        out += _role_rows(db, agent_id, roles, "subject", wanted)
    return out


@dataclass(frozen=True, slots=True)
class Filed:
    """Where a record is filed: its agent, project and channel, and its instant key
    (cpersona.timerange.row_time: a time-scoped read admits it or not)."""

    agent_id: str
    project_id: str
    channel: str
    instant: int


_STAMP = {"mem": "timestamp", "ep": "start_time"}


@translating
def filed(db: Store, refs: Iterable[tuple[str, int]]) -> dict[tuple[str, int], Filed]:
    """Where each record of `refs` that exists is filed."""
    out: dict[tuple[str, int], Filed] = {}
    by_kind: dict[str, list[int]] = {}
    for kind, row_id in dict.fromkeys(refs):
        by_kind.setdefault(kind, []).append(row_id)
    for kind, ids in sorted(by_kind.items()):
        for offset in range(0, len(ids), 500):
            batch = ids[offset : offset + 500]
            marks = ",".join("?" for _ in batch)
            for r in db.query(
                f"SELECT id, agent_id, project_id, channel, {_STAMP[kind]}, created_at "
                f"FROM {TABLE_OF[kind]} WHERE id IN ({marks})",
                batch,
            ):
                out[(kind, int(r[0]))] = Filed(r[1], r[2], r[3], row_time(r[4], r[5]))
    return out


@translating
def same_scope_msg_ids(
    db: Store, agent_id: str, project_id: str, channel: str, prefix: str, exclude_id: int
) -> list[tuple[int, str]]:
    """The newest (at most 50) memories filed at exactly (agent, project, channel) whose
    message id starts with `prefix`, but `exclude_id`: store's supersede candidates."""
    rows = db.query(
        "SELECT id, msg_id FROM memories WHERE agent_id = ? AND project_id = ? AND channel = ? "
        "AND msg_id != '' AND substr(msg_id, 1, ?) = ? AND id != ? ORDER BY id DESC LIMIT 50",
        (agent_id, project_id, channel, len(prefix), prefix, exclude_id),
    )
    return [(int(r[0]), str(r[1])) for r in rows]
