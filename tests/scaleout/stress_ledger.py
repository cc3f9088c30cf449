"""The stress runs' ledger (what every client was told) and its check against the database.

Split from stress_support.py, which re-exports these names: `Book` collects every answer the
clients got; `check` compares the rows the database holds now with it (the rules are listed in
stress_support.py's docstring).
"""

from __future__ import annotations

import sqlite3
from collections import Counter, defaultdict
from contextlib import closing
from dataclasses import dataclass, field

# -- the ledger ----------------------------------------------------------------------------------


@dataclass
class Placed:
    """A memory's id, where it was stored (the dedup probe's columns, which never change) and
    its content: as a client was told it, or as the database holds it."""

    id: int
    agent: str
    project: str
    channel: str
    msg_id: str
    content: str

    @property
    def scope(self) -> tuple[str, str, str, str]:
        return (self.agent, self.project, self.channel, self.msg_id)


@dataclass
class Row(Placed):
    """A row one client was told it stored, and what it was told since."""

    stored_content: str
    locked: bool = False
    deleted: bool = False
    owner: int = -1


@dataclass
class Skip:
    """A store answered `skipped` with an id: the row that blocked it."""

    client: int
    id: int
    reason: str
    agent: str
    project: str
    channel: str
    msg_id: str
    content: str
    resent: bool  # the store was sent again after its server died


@dataclass
class Recall:
    agent: str
    project: str | None  # None: the argument was omitted (no project filter)
    channel: str
    ids: list[int]
    episodes: list[int]


@dataclass
class Book:
    """Everything every client was told, and what went wrong."""

    rows: dict[int, Row] = field(default_factory=dict)
    skips: list[Skip] = field(default_factory=list)
    recalls: list[Recall] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    outcomes: Counter[str] = field(default_factory=Counter)
    latencies: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    acknowledged: int = 0  # answered calls, for the kill trigger
    resent: int = 0
    failovers: int = 0


# -- checking ------------------------------------------------------------------------------------


@dataclass
class DbRow(Placed):
    """A row as the database holds it now."""

    locked: bool


def read_rows(target: str, agents: set[str]) -> dict[int, DbRow]:
    """The rows of `agents` as the database holds them now."""
    sql = "SELECT id, agent_id, project_id, channel, msg_id, content, locked FROM memories"
    if target.startswith(("postgresql://", "postgres://")):
        import psycopg

        with psycopg.connect(target) as conn:
            rows = conn.execute(sql).fetchall()
    else:
        with closing(sqlite3.connect(target)) as conn:
            rows = conn.execute(sql).fetchall()
    out = {}
    for r in rows:
        if r[1] in agents:
            out[int(r[0])] = DbRow(int(r[0]), r[1], r[2], r[3], r[4] or "", r[5], bool(r[6]))
    return out


def _blocks_project(first: str, later: str) -> bool:
    """Whether a row in project `first` is in the dedup probe of a store into `later`."""
    return first in (later, "")


def _blocks_channel(first: str, later: str) -> bool:
    return first in (later, "") if later else first == ""


def check(book: Book, target: str, agents: set[str]) -> list[str]:
    """Every difference between the database and what the clients were told (empty = none)."""
    db = read_rows(target, agents)
    problems: list[str] = []
    # 1. Acknowledged writes: present with the latest content and lock state, unless deleted.
    for row in book.rows.values():
        found = db.get(row.id)
        if row.deleted:
            if found is not None:
                problems.append(f"#{row.id} ({row.agent}): acknowledged deleted, still there")
            continue
        if found is None:
            problems.append(f"#{row.id} ({row.agent}): acknowledged {row.content!r}, lost")
            continue
        if found.scope != row.scope:
            problems.append(f"#{row.id}: stored as {row}, found {found}")
        if found.content != row.content:
            problems.append(f"#{row.id}: told {row.content!r}, found {found.content!r}")
        if found.locked != row.locked:
            problems.append(f"#{row.id}: told locked={row.locked}, found {found.locked}")
    # 2. No row nobody was told about: a row without a `stored` answer must be the id a resent
    #    store was answered with (its first attempt committed on the server that died).
    resent = {s.id: s for s in book.skips if s.resent}
    for row in db.values():
        if row.id in book.rows:
            continue
        skip = resent.get(row.id)
        if skip is None:
            problems.append(f"#{row.id} ({row.agent}): a row nobody was told about: {row}")
        elif (row.agent, row.content) != (skip.agent, skip.content):
            problems.append(f"#{row.id}: resent store {skip}, found {row}")
    # 3. Skips name a row of the caller's agent that the probe covered.
    scope_of = {i: r.scope for i, r in book.rows.items()}
    scope_of.update({i: r.scope for i, r in db.items()})
    for skip in book.skips:
        known = scope_of.get(skip.id)
        if known is None:
            problems.append(f"skip names #{skip.id}, a row never seen: {skip}")
            continue
        agent, project, channel, msg_id = known
        ok = agent == skip.agent and _blocks_project(project, skip.project)
        if skip.reason == "duplicate msg_id":
            ok = ok and msg_id == skip.msg_id
        elif skip.reason == "duplicate content":
            ok = ok and _blocks_channel(channel, skip.channel)
        if not ok:
            problems.append(f"skip {skip} names #{skip.id} outside its probe: {known}")
    # 4. No two rows a dedup rule forbids: the later row's store probed the earlier one (ids
    #    grow with commit order; msg_id, project and channel never change; an edited row's
    #    content is unique, so only never-edited rows can share a stored content).
    by_agent: dict[str, list[DbRow]] = defaultdict(list)
    for row in sorted(db.values(), key=lambda r: r.id):
        by_agent[row.agent].append(row)
    for rows in by_agent.values():
        seen_msg: dict[str, list[DbRow]] = defaultdict(list)
        seen_content: dict[str, list[DbRow]] = defaultdict(list)
        for row in rows:
            for first in seen_msg.get(row.msg_id, []) if row.msg_id else []:
                if _blocks_project(first.project, row.project):
                    problems.append(f"duplicate msg_id: #{first.id} {first} and #{row.id} {row}")
            for first in seen_content.get(row.content, []):
                if _blocks_project(first.project, row.project) and _blocks_channel(
                    first.channel, row.channel
                ):
                    problems.append(f"duplicate content: #{first.id} {first} and #{row.id} {row}")
            if row.msg_id:
                seen_msg[row.msg_id].append(row)
            seen_content[row.content].append(row)
    # 5. Every recalled row is in the caller's scope.
    for recall in book.recalls:
        if recall.episodes:
            problems.append(f"recall returned episodes none of the clients wrote: {recall}")
        for mid in recall.ids:
            known = scope_of.get(mid)
            if known is None:
                problems.append(f"recall returned #{mid}, a row never seen: {recall}")
                continue
            agent, project, channel, _ = known
            inside = agent == recall.agent
            if recall.project is not None:
                inside = inside and project in (recall.project, "")
            if recall.channel:
                inside = inside and channel in (recall.channel, "")
            if not inside:
                problems.append(f"recall {recall} returned #{mid} from {known}")
    return problems
