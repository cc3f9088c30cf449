"""State that every server on one database must agree on: the no-persist pauses and the
per-subject alias ledger (issue 19 item 3).

`cpersona_pauses` holds one row per paused bucket: the SHA-256 of the bucket name (the
`session_key` itself never reaches the database, surface.md §10.1) and its deadline in Unix
seconds *by the database's clock*. Every server reads "now" from the database in the same
statement that reads the deadline, so clock skew between servers neither shortens nor
stretches a pause, and all of them answer the same `expires_at`.

`cpersona_subject_aliases` maps each verified `(issuer, subject)` to its alias. The primary
key makes the subject's row unique and the UNIQUE alias makes an alias one subject's, so two
servers meeting a new subject at once both insert-or-read and end with the one row that won.

Code above storage/ decides *whether* to use these tables (`Capabilities.shared`); session.py
and server/subjects.py say which surfaces do.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from cpersona.storage.error_kinds import translating
from cpersona.storage.interface import Connection, Store

#: The tables, in SQLite's DDL (storage/schema.py; storage/pg/schema.py has PostgreSQL's).
SQLITE_DDL = (
    """CREATE TABLE IF NOT EXISTS cpersona_pauses (
    bucket   TEXT PRIMARY KEY,
    deadline REAL NOT NULL
)""",
    """CREATE TABLE IF NOT EXISTS cpersona_subject_aliases (
    issuer  TEXT NOT NULL,
    subject TEXT NOT NULL,
    alias   TEXT NOT NULL UNIQUE,
    PRIMARY KEY (issuer, subject)
)""",
)


def bucket_digest(name: str) -> str:
    return hashlib.sha256(name.encode("utf-8")).hexdigest()


def _epoch(value: Any) -> float:
    # CURRENT_TIMESTAMP is a timestamptz on PostgreSQL and 'YYYY-MM-DD HH:MM:SS' UTC text on
    # SQLite: standard SQL on both, normalised here rather than by a dialect function.
    when = value if isinstance(value, datetime) else datetime.fromisoformat(str(value))
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return when.timestamp()


# -- pauses --------------------------------------------------------------------------------------


@translating
def database_now(db: Store) -> float:
    """The database's clock, in Unix seconds."""
    row = db.query_one("SELECT CURRENT_TIMESTAMP")
    assert row is not None
    return _epoch(row[0])


@translating
def pause_deadline(db: Store, name: str) -> tuple[float, float | None]:
    """(the database's now, the bucket's deadline or None), in one statement. The deadline
    may already have passed: expiry is the caller's comparison (lazy, surface.md §10.2)."""
    row = db.query_one(
        "SELECT CURRENT_TIMESTAMP, (SELECT deadline FROM cpersona_pauses WHERE bucket = ?)",
        (bucket_digest(name),),
    )
    assert row is not None
    deadline = row[1]
    return _epoch(row[0]), None if deadline is None else float(deadline)


@dataclass(frozen=True, slots=True)
class Paused:
    """What `put_pause` did: the deadline it set, or (refused) the earliest live deadline."""

    now: float
    deadline: float | None
    earliest: float | None = None


def _now(conn: Connection, clock: float | None) -> float:
    if clock is not None:
        return clock
    return _epoch(conn.execute("SELECT CURRENT_TIMESTAMP").fetchone()[0])


@translating
def put_pause(db: Store, name: str, ttl: int, cap: int, clock: float | None = None) -> Paused:
    """Pause `name` until now + `ttl` (replacing its deadline), unless `cap` other buckets
    hold a live pause. `clock` replaces the database's now (tests move time with it).

    The cap is checked and the row written in one transaction, not under a table lock: two
    servers pausing new keys at the same moment may end one row per server above it, which
    only bounds the table, never evicts a pause."""
    key = bucket_digest(name)
    with db.atomic() as conn:
        now = _now(conn, clock)
        conn.execute("DELETE FROM cpersona_pauses WHERE deadline <= ?", (now,))
        mine = conn.execute("SELECT 1 FROM cpersona_pauses WHERE bucket = ?", (key,)).fetchone()
        if mine is None:
            live, earliest = conn.execute(
                "SELECT COUNT(*), MIN(deadline) FROM cpersona_pauses"
            ).fetchone()
            if live >= cap:
                return Paused(now, None, float(earliest))
        conn.execute(
            "INSERT INTO cpersona_pauses(bucket, deadline) VALUES (?, ?) "
            "ON CONFLICT (bucket) DO UPDATE SET deadline = excluded.deadline",
            (key, now + ttl),
        )
    return Paused(now, now + ttl)


@translating
def drop_pause(db: Store, name: str, clock: float | None = None) -> bool:
    """End `name`'s pause; whether a live one was there."""
    with db.atomic() as conn:
        now = _now(conn, clock)
        cur = conn.execute(
            "DELETE FROM cpersona_pauses WHERE bucket = ? AND deadline > ?",
            (bucket_digest(name), now),
        )
        return cur.rowcount > 0


@translating
def live_pauses(db: Store, clock: float | None = None) -> int:
    """How many buckets hold a live pause."""
    now = database_now(db) if clock is None else clock
    row = db.query_one("SELECT COUNT(*) FROM cpersona_pauses WHERE deadline > ?", (now,))
    assert row is not None
    return int(row[0])


# -- the alias ledger ----------------------------------------------------------------------------


@translating
def subject_alias(db: Store, issuer: str, subject: str) -> str | None:
    row = db.query_one(
        "SELECT alias FROM cpersona_subject_aliases WHERE issuer = ? AND subject = ?",
        (issuer, subject),
    )
    return None if row is None else str(row[0])


@translating
def alias_issued(db: Store, alias: str) -> bool:
    row = db.query_one("SELECT 1 FROM cpersona_subject_aliases WHERE alias = ?", (alias,))
    return row is not None


@translating
def issue_alias(db: Store, issuer: str, subject: str, alias: str) -> tuple[str | None, bool]:
    """Insert-or-read the subject's alias, offering `alias`: (the subject's alias, whether this
    call inserted it). (None, False) when `alias` belongs to another subject already (the
    caller offers another). No lock: the two unique keys decide between racing servers."""
    with db.atomic() as conn:
        inserted = conn.execute(
            "INSERT INTO cpersona_subject_aliases(issuer, subject, alias) VALUES (?, ?, ?) "
            "ON CONFLICT DO NOTHING",
            (issuer, subject, alias),
        ).rowcount
        row = conn.execute(
            "SELECT alias FROM cpersona_subject_aliases WHERE issuer = ? AND subject = ?",
            (issuer, subject),
        ).fetchone()
    if row is None:
        return None, False
    return str(row[0]), inserted > 0


@translating
def import_aliases(db: Store, aliases: Iterable[tuple[str, str, str]]) -> list[str]:
    """Copy a ledger file's `(issuer, subject, alias)` rows in, keeping each alias; rows
    already there are kept. The answer lists the conflicts (a subject the database gives
    another alias, or an alias it gives another subject); when there is one, nothing is
    written."""
    conflicts: list[str] = []
    try:
        with db.atomic() as conn:
            for issuer, subject, alias in aliases:
                conn.execute(
                    "INSERT INTO cpersona_subject_aliases(issuer, subject, alias) "
                    "VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
                    (issuer, subject, alias),
                )
                row = conn.execute(
                    "SELECT issuer, subject FROM cpersona_subject_aliases WHERE alias = ?",
                    (alias,),
                ).fetchone()
                if row is None or (row[0], row[1]) != (issuer, subject):
                    conflicts.append(f"{issuer!r} / {subject!r} -> {alias!r}")
            if conflicts:
                raise _RollBack
    except _RollBack:
        pass
    return conflicts


class _RollBack(Exception):
    """Leaves `atomic()` by rolling back: an import with a conflict writes nothing."""
