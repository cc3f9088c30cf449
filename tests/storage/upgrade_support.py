"""Databases made by the current release (tests/fixtures/, README.md there) and every row of
them, read past cpersona, for the upgrade-in-place tests of test_storage_upgrade.py.

A row is read as {column: value} straight from the driver (sqlite3, psycopg), so a named
migration that changes a column's type (TEXT to timestamptz, BIGINT to boolean, TEXT to jsonb)
still compares: `same_value` accepts a new value that holds exactly what the old one did.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from contextlib import closing
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
RELEASE_DB = FIXTURES / "cpersona-release.db"
RELEASE_PG = FIXTURES / "cpersona-release-pg.sql"
RELEASE_ANSWERS = FIXTURES / "cpersona-release-answers.json"

#: The release's read-only tool calls whose answers do not depend on the clock (recall's
#: scores age with it); their answers are in RELEASE_ANSWERS, in this order.
READS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("list_memories", {"agent_id": ""}),
    ("list_memories", {"agent_id": "alice", "project_id": "proj-x"}),
    ("list_memories", {"agent_id": "bob", "project_id": ""}),
    ("list_memories", {"agent_id": "alice", "since": "2025-03-04T00:00:00Z"}),
    ("list_episodes", {"agent_id": ""}),
    ("list_episodes", {"agent_id": "alice", "project_id": "proj-x"}),
    ("get_profile", {"agent_id": "alice"}),
    ("get_profile", {"agent_id": "bob"}),
    ("get_profile", {"agent_id": "carol"}),
    ("get_contents", {"agent_id": "alice", "refs": ["mem:1", "mem:2", "ep:1", "mem:7"]}),
)

#: Tables a named migration may add rows to (the record of what ran; on PostgreSQL the
#: sequences of the tables it creates, e.g. pg_0007's `entities` and `relations`); every old
#: row stays.
GROWING = frozenset({"cpersona_migrations", "schema_version", "pg_sequences"})

Rows = dict[str, list[dict[str, Any]]]


def release_answers(backend: str) -> list[Any]:
    recorded = json.loads(RELEASE_ANSWERS.read_text(encoding="utf-8"))
    return list(recorded[backend])


def copy_release_db(target: Path) -> Path:
    shutil.copyfile(RELEASE_DB, target)
    return target


def load_release_pg(url: str) -> None:
    """Run the release's dump in the (empty) database at `url`."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(RELEASE_PG.read_text(encoding="utf-8"))


# -- every row ---------------------------------------------------------------------------------

_FTS_SHADOW = ("_data", "_idx", "_config", "_docsize", "_content")


def sqlite_rows(path: Path) -> Rows:
    """Every row of every table of the file (FTS5's shadow tables, the index's internals, are
    read through their virtual table instead)."""
    with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as conn:
        names = [
            str(r[0]) for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        ]
        fts = [n for n in names if n.endswith("_fts")]
        out: Rows = {}
        for name in names:
            if any(name == f"{f}{s}" for f in fts for s in _FTS_SHADOW):
                continue
            select = "rowid AS fts_rowid, *" if name in fts else "*"
            cur = conn.execute(f'SELECT {select} FROM "{name}"')
            cols = [d[0] for d in cur.description]
            out[name] = [dict(zip(cols, row, strict=True)) for row in cur]
        return out


def pg_rows(url: str) -> Rows:
    """Every row of every table of the database's schema, and each sequence's position (as
    table `pg_sequences`): the ids a new row will get."""
    with psycopg.connect(url) as conn:
        names = [
            str(r[0])
            for r in conn.execute(
                "SELECT table_name FROM information_schema.tables "
                "WHERE table_schema = current_schema() AND table_type = 'BASE TABLE'"
            )
        ]
        out: Rows = {}
        for name in names:
            cur = conn.execute(f'SELECT * FROM "{name}"')
            cols = [d.name for d in cur.description or ()]
            out[name] = [dict(zip(cols, row, strict=True)) for row in cur]
        out["pg_sequences"] = [
            {"sequencename": r[0], "last_value": r[1]}
            for r in conn.execute(
                "SELECT sequencename, last_value FROM pg_sequences "
                "WHERE schemaname = current_schema()"
            )
        ]
        return out


# -- comparing ---------------------------------------------------------------------------------


def _instant(text: str) -> datetime | None:
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        return None
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def same_value(old: Any, new: Any) -> bool:
    """Whether `new` holds exactly what `old` held, in the same or a more precise type."""
    if type(old) is type(new):
        return bool(old == new)
    if isinstance(new, bool) and isinstance(old, int):
        return old in (0, 1) and bool(old) is new
    if isinstance(new, datetime) and isinstance(old, str):
        return _instant(old) == (new if new.tzinfo else new.replace(tzinfo=UTC))
    if isinstance(new, dict | list) and isinstance(old, str):
        return bool(json.loads(old) == new)
    if isinstance(new, memoryview | bytearray) or isinstance(old, memoryview | bytearray):
        return bytes(old) == bytes(new)
    return bool(old == new)


def _key(row: dict[str, Any]) -> str:
    return repr(sorted(row.items()))


def lost_rows(before: Rows, after: Rows) -> dict[str, list[dict[str, Any]]]:
    """Per table, the rows of `before` that `after` does not hold field by field (on the old
    columns; a migration may add columns). A table that grows (GROWING) may gain rows; any
    other must hold exactly the old rows, no more."""
    lost: dict[str, list[dict[str, Any]]] = {}
    for table, old_rows in before.items():
        new_rows = list(after.get(table, [{"<table missing>": True}] if old_rows else []))
        missing = []
        for old in sorted(old_rows, key=_key):
            at = next(
                (
                    i
                    for i, new in enumerate(new_rows)
                    if all(c in new and same_value(v, new[c]) for c, v in old.items())
                ),
                None,
            )
            if at is None:
                missing.append(old)
            else:
                del new_rows[at]
        if table not in GROWING:
            missing += [{"<extra row>": new} for new in new_rows]
        if missing:
            lost[table] = missing
    return lost
