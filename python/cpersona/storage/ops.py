"""The SQL fragments that differ between the backends, one operations object per backend.

Storage SQL is written once, in SQL both SQLite (3.40 here) and PostgreSQL run natively:
`TRUE`/`FALSE`, `COALESCE`, `INSERT ... ON CONFLICT (key) DO NOTHING` / `DO UPDATE SET
c = excluded.c`, `RETURNING id`, `IS [NOT] DISTINCT FROM`, `CAST(x AS BIGINT | DOUBLE
PRECISION | TEXT)`, `SUM` (with `COALESCE` where SQLite's `total()` was), `?` placeholders
(PostgreSQL's connection converts them; storage/pg/dialect.py). What cannot be written once
is asked of the backend's `SqlOps`: each method returns an SQL fragment (and, where the
backends bind a different value, the parameter to bind).

Reach it as `db.ops` (either Database), `conn.ops` (a connection of either: SQLite's are
`OpsConnection`s, PostgreSQL's carry it), or `ops_of(conn)` for any connection, a plain
`sqlite3.Connection` included. The fragments that are a template of their arguments are
spelled side by side in `_Spellings` (one line a fragment, both backends); each backend's class
spells the rest. Adding a backend means one more spelling there and one more class.

Only additive changes here: other storage modules are written against these names.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Callable
from typing import Any, Protocol

__all__ = [
    "POSTGRES",
    "SQLITE",
    "OpsConnection",
    "PostgresOps",
    "SqlOps",
    "SqliteOps",
    "glob_escape",
    "glob_regex",
    "ops_of",
]

#: The stamp naming a row's instant, per table with one.
_STAMP = {"memories": "timestamp", "episodes": "start_time"}
_ASCII_UPPER = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
_ASCII_LOWER = "abcdefghijklmnopqrstuvwxyz"


class SqlOps(Protocol):
    """What one backend's SQL says differently. Fragments take SQL expressions as text."""

    #: "sqlite" or "postgresql" (the value `Database.dialect` has).
    name: str

    def now(self) -> str:
        """The current UTC time as text `YYYY-MM-DD HH:MM:SS` (fixed within one statement)."""
        ...

    def ascii_lower(self, expr: str) -> str:
        """`expr` with A-Z folded to a-z and nothing else changed (SQLite's lower())."""
        ...

    def ascii_upper(self, expr: str) -> str:
        """`expr` with a-z folded to A-Z and nothing else changed."""
        ...

    def position(self, needle: str, haystack: str) -> str:
        """1-based position of `needle` in `haystack`, 0 when absent."""
        ...

    def prefix_match(self, expr: str) -> str:
        """A condition: `expr` starts with the bound parameter `prefix_param(prefix)` (one ?)."""
        ...

    def prefix_param(self, prefix: str) -> str:
        """The parameter `prefix_match` binds for a literal prefix (any characters)."""
        ...

    def glob_match(self, expr: str) -> str:
        """A condition: `expr` matches the bound parameter `glob_param(pattern)` (one ?),
        a GLOB pattern (`*`, `?`, `[...]`, `[^...]`; case sensitive; the whole text)."""
        ...

    def glob_param(self, pattern: str) -> str:
        """The parameter `glob_match` binds for a GLOB pattern."""
        ...

    def greatest(self, a: str, b: str) -> str:
        """The larger of two values (SQLite's two-argument MAX)."""
        ...

    def least(self, a: str, b: str) -> str:
        """The smaller of two values (SQLite's two-argument MIN)."""
        ...

    def table_exists(self) -> str:
        """A query with one ? (a name) answering one row when a table or view of that name
        exists in this database (PostgreSQL: in the current schema)."""
        ...

    def column_names(self) -> str:
        """A query with one ? (a table name) answering the names of the table's stored
        columns in declaration order (PostgreSQL's generated columns, derived and never
        written, left out); no rows when there is no such table."""
        ...

    def identity_high(self) -> str:
        """A query with one ? (a table with an `id` identity) answering one row: the largest
        id its identity has handed out, deleted rows' included (0 for none)."""
        ...

    def raise_identity(self) -> tuple[str, ...]:
        """Statements, each binding (table, mark), after which the table's `id` identity
        hands out only ids greater than `mark` (it is never lowered; a mark <= 0 does
        nothing)."""
        ...

    def json_valid(self, expr: str) -> str:
        """A condition: the text `expr` is well-formed JSON (NULL for NULL)."""
        ...

    def json_text(self, expr: str, key: str) -> str:
        """Member `key` of the JSON object in the text `expr`, as text; NULL when `expr` is
        not a JSON object or has no such member. Never raises on malformed JSON. `key` is an
        identifier (letters, digits, `_`), not a parameter."""
        ...

    def age_seconds(self, expr: str) -> str:
        """Seconds from the time text `expr` to now (negative in the future); NULL when the
        backend cannot read `expr` as a time."""
        ...

    def utc_iso(self, expr: str) -> str:
        """The time text `expr` as `YYYY-MM-DDTHH:MM:SS+00:00` (the instant in UTC, seconds
        cut); NULL when the backend cannot read `expr` as a time."""
        ...

    def database_bytes(self) -> str:
        """A query answering one row: the bytes the database takes."""
        ...

    def blob(self, expr: str) -> str:
        """`expr` as a byte string."""
        ...

    def byte_length(self, expr: str) -> str:
        """The length in bytes of an embedding column's value (float32s: 4 per dimension)."""
        ...

    def created_key(self, alias: str = "") -> str:
        """created_at as Unix seconds, 0 when it does not parse: the window and index order
        (`<key> DESC, id DESC`). `alias` qualifies the columns (`"m"` -> `m.created_at`)."""
        ...

    def source_id(self, alias: str = "") -> str:
        """`source`'s `$.id` member of a memory as text (NULL when absent or not an object)."""
        ...

    def created_instant(self, alias: str = "") -> str:
        """created_at as an instant orderable to the second, NULL when it does not parse."""
        ...

    def stamp_instant(self, table: str, alias: str = "") -> str:
        """An orderable instant of a row's stamp (memories' `timestamp`, episodes'
        `start_time`), NULL where this backend does not read it (SQLite: julianday()'s
        grammar; PostgreSQL: the stored `instant_key`, storage/pg/keys.py)."""
        ...

    def not_indexed(self) -> str:
        """A hint after a table name in FROM: look rows up by their key, not by an index the
        WHERE clause also matches (SQLite's planner needs it without statistics)."""
        ...


class _Spelled:
    """One fragment of `SqlOps` that is a template of its arguments, spelled for each backend:
    `{0}`, `{1}` stand for the SQL expressions passed (in `SqlOps`' order)."""

    def __init__(self, sqlite: str, postgresql: str) -> None:
        self.spellings = {"sqlite": sqlite, "postgresql": postgresql}

    def __get__(self, ops: _Spellings, owner: type | None = None) -> Callable[..., str]:
        return self.spellings[ops.name].format


class _Spellings:
    """The fragments both backends spell as a template, side by side (SQLite 3.40's, then
    PostgreSQL's); a backend's class spells the others itself."""

    name: str

    now = _Spelled(
        "datetime('now')",
        "to_char(statement_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS')",
    )
    # lower() folds by the locale on PostgreSQL; SQLite folds A-Z only.
    ascii_lower = _Spelled("lower({0})", f"translate({{0}}, '{_ASCII_UPPER}', '{_ASCII_LOWER}')")
    ascii_upper = _Spelled("upper({0})", f"translate({{0}}, '{_ASCII_LOWER}', '{_ASCII_UPPER}')")
    position = _Spelled("instr({1}, {0})", "strpos({1}, {0})")
    # GLOB, not LIKE, on SQLite: case sensitive, and the agent_id indexes serve it as a range
    # scan.
    prefix_match = _Spelled("{0} GLOB ?", "starts_with({0}, ?)")
    glob_match = _Spelled("{0} GLOB ?", "{0} ~ ?")
    greatest = _Spelled("MAX({0}, {1})", "GREATEST({0}, {1})")
    least = _Spelled("MIN({0}, {1})", "LEAST({0}, {1})")
    table_exists = _Spelled(
        "SELECT 1 FROM sqlite_master WHERE type IN ('table', 'view') AND name = ?",
        "SELECT 1 FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n "
        "ON n.oid = c.relnamespace WHERE n.nspname = current_schema() "
        "AND c.relkind IN ('r', 'p', 'v', 'm', 'f') AND c.relname = ?",
    )
    column_names = _Spelled(
        "SELECT name FROM pragma_table_info(?) ORDER BY cid",
        "SELECT column_name FROM information_schema.columns "
        "WHERE table_schema = current_schema() AND table_name = ? "
        "AND is_generated = 'NEVER' ORDER BY ordinal_position",
    )
    # PostgreSQL's last_value is NULL until the sequence first hands out a value.
    identity_high = _Spelled(
        "SELECT COALESCE((SELECT seq FROM sqlite_sequence WHERE name = ?), 0)",
        "SELECT COALESCE((SELECT last_value FROM pg_sequences "
        "WHERE schemaname || '.' || sequencename = pg_get_serial_sequence(?, 'id')), 0)",
    )
    json_valid = _Spelled("json_valid({0})", "({0} IS JSON)")
    # On PostgreSQL, text without an offset is UTC: every connection's TimeZone is UTC
    # (storage/pg/db.py).
    age_seconds = _Spelled(
        "((julianday('now') - julianday({0})) * 86400.0)",
        "CASE WHEN pg_input_is_valid({0}, 'timestamptz') THEN "
        "extract(epoch FROM statement_timestamp() - CAST({0} AS timestamptz)) END",
    )
    utc_iso = _Spelled(
        "strftime('%Y-%m-%dT%H:%M:%S+00:00', {0})",
        "CASE WHEN pg_input_is_valid({0}, 'timestamptz') THEN "
        "to_char(CAST({0} AS timestamptz) AT TIME ZONE 'UTC', "
        """'YYYY-MM-DD"T"HH24:MI:SS"+00:00"') END""",
    )
    database_bytes = _Spelled(
        "SELECT page_count * page_size FROM pragma_page_count(), pragma_page_size()",
        "SELECT pg_database_size(current_database())",
    )
    blob = _Spelled("CAST({0} AS BLOB)", "CAST({0} AS BYTEA)")
    byte_length = _Spelled("length({0})", "(vector_dims({0}) * 4)")
    not_indexed = _Spelled("NOT INDEXED", "")


def _column(alias: str, name: str) -> str:
    """`name`, `alias.`-qualified when an alias is given."""
    return f"{alias}.{name}" if alias else name


class SqliteOps(_Spellings):
    """SQLite 3.40's spelling."""

    name = "sqlite"

    def prefix_param(self, prefix: str) -> str:
        return glob_escape(prefix) + "*"

    def glob_param(self, pattern: str) -> str:
        return pattern

    def raise_identity(self) -> tuple[str, ...]:
        # AUTOINCREMENT's high-water mark is sqlite_sequence's row (absent until a first id).
        mark = "WITH p(name, mark) AS (VALUES (?, ?)) "
        return (
            mark + "UPDATE sqlite_sequence SET seq = MAX(seq, (SELECT mark FROM p)) "
            "WHERE name = (SELECT name FROM p)",
            mark + "INSERT INTO sqlite_sequence(name, seq) SELECT name, mark FROM p "
            "WHERE mark > 0 AND NOT EXISTS (SELECT 1 FROM sqlite_sequence s WHERE s.name = p.name)",
        )

    def json_text(self, expr: str, key: str) -> str:
        _check_key(key)
        # CASE: json_extract raises on malformed JSON even behind AND.
        member = f"CAST(json_extract({expr}, '$.{key}') AS TEXT)"
        return f"CASE WHEN json_valid({expr}) THEN {member} END"

    def created_key(self, alias: str = "") -> str:
        col = _column(alias, "created_at")
        return f"COALESCE(CAST(strftime('%s', {col}) AS INTEGER), 0)"

    def source_id(self, alias: str = "") -> str:
        return self.json_text(_column(alias, "source"), "id")

    def created_instant(self, alias: str = "") -> str:
        return f"datetime({_column(alias, 'created_at')})"

    def stamp_instant(self, table: str, alias: str = "") -> str:
        return f"julianday({_column(alias, _STAMP[table])})"


class PostgresOps(_Spellings):
    """PostgreSQL's spelling (16 or newer: `IS JSON`, `pg_input_is_valid`). Keys SQLite
    computes per query are plain columns here, written by the storage write paths
    (storage/pg/keys.py)."""

    name = "postgresql"

    def prefix_param(self, prefix: str) -> str:
        return prefix

    def glob_param(self, pattern: str) -> str:
        return glob_regex(pattern)

    def raise_identity(self) -> tuple[str, ...]:
        current = (
            "(SELECT COALESCE(last_value, 0) FROM pg_sequences "
            "WHERE schemaname || '.' || sequencename = seq)"
        )
        return (
            f"SELECT setval(seq, GREATEST(mark, {current}), true) FROM ("
            "SELECT pg_get_serial_sequence(name, 'id') AS seq, mark "
            "FROM (VALUES (?, CAST(? AS BIGINT))) AS p(name, mark) WHERE mark > 0) AS q",
        )

    def json_text(self, expr: str, key: str) -> str:
        _check_key(key)
        # The cast applies to the guarded value: a constant `expr` (a bound parameter in a
        # custom plan) is folded by the planner, which would cast it even behind a CASE arm.
        return f"(CAST(CASE WHEN {expr} IS JSON OBJECT THEN {expr} END AS json) ->> '{key}')"

    def created_key(self, alias: str = "") -> str:
        return _column(alias, "created_key")

    def source_id(self, alias: str = "") -> str:
        return _column(alias, "source_id")

    def created_instant(self, alias: str = "") -> str:
        # created_key is 0 where created_at does not parse (storage/pg/keys.py).
        return f"NULLIF({self.created_key(alias)}, 0)"

    def stamp_instant(self, table: str, alias: str = "") -> str:
        if table not in _STAMP:
            raise ValueError(f"no stamp in table {table!r}")
        return _column(alias, "instant_key")


SQLITE: SqlOps = SqliteOps()
POSTGRES: SqlOps = PostgresOps()


class OpsConnection(sqlite3.Connection):
    """An sqlite3 connection that carries its backend's operations (`conn.ops`)."""

    ops: SqlOps = SQLITE


def ops_of(conn: Any) -> SqlOps:
    """The operations of any connection or database (a plain sqlite3.Connection: SQLite's)."""
    ops: SqlOps = getattr(conn, "ops", SQLITE)
    return ops


def _check_key(key: str) -> None:
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
        raise ValueError(f"JSON member {key!r} is not an identifier")


def glob_escape(text: str) -> str:
    """`text` as a GLOB pattern matching exactly it (each wildcard in a one-character class)."""
    return re.sub(r"([*?\[])", r"[\1]", text)


def _glob_class(body: str, negate: bool) -> str:
    """One `[...]` of a GLOB pattern as a regular expression, read as SQLite reads it: a `]`
    first is a member, `a-z` a range unless `-` is first or last, and a reversed range (`?-.`)
    admits nothing (PostgreSQL would refuse it). Every member is written as a code point
    escape, so no character of the class is special to the regular expression."""
    ranges: list[tuple[int, int]] = []
    prior = 0  # SQLite's prior_c: the last single member, 0 after a range or a leading `]`
    k = 0
    if body.startswith("]"):
        ranges.append((ord("]"), ord("]")))
        k = 1
    while k < len(body):
        c = body[k]
        if c == "-" and prior and k + 1 < len(body):
            hi = ord(body[k + 1])
            if hi >= prior:
                ranges.append((prior, hi))
            prior = 0
            k += 2
            continue
        ranges.append((ord(c), ord(c)))
        prior = ord(c)
        k += 1
    if not ranges:
        return "." if negate else "(?!)"
    members = "".join(
        f"\\U{lo:08X}" if lo == hi else f"\\U{lo:08X}-\\U{hi:08X}" for lo, hi in ranges
    )
    return ("[^" if negate else "[") + members + "]"


def glob_regex(pattern: str) -> str:
    """A GLOB pattern as an anchored POSIX regular expression matching the same texts:
    `*` any run, `?` one character, `[...]`/`[^...]` a class (a `]` first is a member),
    everything else literal; an unclosed `[` matches nothing, as in SQLite."""
    out = ["^"]
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == "*":
            out.append(".*")
        elif c == "?":
            out.append(".")
        elif c == "[":
            j = i + 1
            negate = j < n and pattern[j] == "^"
            if negate:
                j += 1
            start = j
            if j < n and pattern[j] == "]":
                j += 1
            while j < n and pattern[j] != "]":
                j += 1
            if j >= n:
                return "(?!)"
            out.append(_glob_class(pattern[start:j], negate))
            i = j
        else:
            out.append(re.sub(r"([^A-Za-z0-9_])", r"\\\1", c))
        i += 1
    out.append("$")
    return "".join(out)
