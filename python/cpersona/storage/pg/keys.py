"""The derived key columns of the PostgreSQL schema, as native generated-column expressions.

Three values SQLite computes in each query are stored columns on PostgreSQL, so the vector
window and the time-scoped scans read them from btrees (storage/pg/vectors.py):

- `created_key`: `created_at` as Unix seconds, the window order `created_key DESC, id DESC`
  (SQLite: `COALESCE(CAST(strftime('%s', created_at) AS INTEGER), 0)`). Read from the
  canonical stamp `YYYY-MM-DD HH:MM:SS`, the only form any cpersona write path stores (the
  column default, `portability/records.sqlite_stamp`, 2.5.x's `datetime('now')`); the day is
  counted on from the 1st of its month, as SQLite counts (day 31 of April is May 1st). Other
  text keys the whole seconds of its `instant_key` (below), else 0 (SQLite reads a few more
  forms: docs/compatibility.md).
- `instant_key`: a row's instant in microseconds since the Unix epoch where SQL can know it
  exactly as Python's `fromisoformat` reads it (cpersona.timerange.row_time): `YYYY-MM-DD`
  and `YYYY-MM-DD[T ]HH:MM[:SS[.f{1,6}]]` with `Z`, `+HH:MM`, `-HH:MM` or no offset (UTC), a
  valid calendar date, hour < 24, years 2-9998. Anything else is NULL, and the scans time that
  row in Python: NULL is never wrong, only slower.
- `source_id`: a memory's `source` `$.id` member as text where `source` is a JSON object:
  strings unescaped, true/false as 1/0, null as NULL, numbers and nested values as their JSON
  text.

Generated columns and not values written by the storage code: every write path (imports,
`cpersona migrate`, repairs, a hand-written UPDATE) keeps them current by construction, and
`cpersona migrate` already leaves generated columns out of the copy both ways. The
expressions use PostgreSQL's immutable built-ins only: no function of cpersona's (and none
emulating SQLite) exists for them.
"""

from __future__ import annotations

_CANONICAL = (
    "'^[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01]) ([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9]$'"
)
_ISO = (
    r"'^[0-9]{4}-[0-9]{2}-[0-9]{2}([T ][0-9]{2}:[0-9]{2}(:[0-9]{2}(\.[0-9]{1,6})?)?"
    r"(Z|[+-][0-9]{2}:[0-9]{2})?)?$'"
)


def _int(expr: str, start: int, length: int = 2) -> str:
    return f"CAST(substr({expr}, {start}, {length}) AS bigint)"


def created_key(col: str) -> str:
    """The `created_key` of the text column `col` (module docstring)."""
    days = (
        f"(make_date(CAST(substr({col}, 1, 4) AS integer), CAST(substr({col}, 6, 2) AS integer), 1)"
        " - DATE '1970-01-01')"
    )
    seconds = (
        f"{days} * CAST(86400 AS bigint) + ({_int(col, 9)} - 1) * 86400"
        f" + {_int(col, 12)} * 3600 + {_int(col, 15)} * 60 + {_int(col, 18)}"
    )
    # Year 0 is no date to make_date (and no stamp cpersona writes). Other ISO 8601 forms
    # key their instant's whole seconds (rounded down, as SQLite's %s is), else 0.
    whole = f"CAST(floor(CAST(({instant_key(col)}) AS numeric) / 1000000) AS bigint)"
    return (
        f"CASE WHEN {col} ~ {_CANONICAL} AND substr({col}, 1, 4) <> '0000' "
        f"THEN {seconds} ELSE COALESCE({whole}, 0) END"
    )


def instant_key(col: str) -> str:
    """The `instant_key` of the text column `col` (module docstring)."""
    y, mo, d = _int(col, 1, 4), _int(col, 6), _int(col, 9)
    timed = f"length({col}) > 10"
    h = f"CASE WHEN {timed} THEN {_int(col, 12)} ELSE 0 END"
    mi = f"CASE WHEN {timed} THEN {_int(col, 15)} ELSE 0 END"
    s = f"CASE WHEN substr({col}, 17, 1) = ':' THEN {_int(col, 18)} ELSE 0 END"
    us = rf"COALESCE(CAST(rpad(substring({col} FROM '\.([0-9]{{1,6}})'), 6, '0') AS bigint), 0)"
    off = f"substring({col} FROM '([+-][0-9]{{2}}:[0-9]{{2}})$')"
    off_h, off_m = f"COALESCE({_int(off, 2)}, 0)", f"COALESCE({_int(off, 5)}, 0)"
    sign = f"CASE WHEN left({off}, 1) = '-' THEN -1 ELSE 1 END"
    leap = f"CAST(({y} % 4 = 0 AND ({y} % 100 <> 0 OR {y} % 400 = 0)) AS integer)"
    month_days = (
        f"CASE WHEN {mo} = 2 THEN 28 + {leap} WHEN {mo} IN (4, 6, 9, 11) THEN 30 ELSE 31 END"
    )
    valid = (
        f"{y} BETWEEN 2 AND 9998 AND {mo} BETWEEN 1 AND 12 AND {d} BETWEEN 1 AND {month_days} "
        f"AND {h} <= 23 AND {mi} <= 59 AND {s} <= 59 AND {off_h} <= 23 AND {off_m} <= 59"
    )
    value = (
        f"(((make_date(CAST({y} AS integer), CAST({mo} AS integer), CAST({d} AS integer))"
        f" - DATE '1970-01-01') * CAST(86400 AS bigint) + {h} * 3600 + {mi} * 60 + {s}"
        f" - ({off_h} * 60 + {off_m}) * {sign} * 60) * 1000000 + {us})"
    )
    # Nested CASEs: the fields are read only once the shape says they are digits.
    return f"CASE WHEN {col} ~ {_ISO} THEN CASE WHEN {valid} THEN {value} END END"


def source_id(col: str) -> str:
    """The `source_id` of the text column `col` (module docstring)."""
    member = f"(CAST({col} AS json) -> 'id')"
    return (
        f"CASE WHEN {col} IS JSON OBJECT THEN CASE json_typeof({member}) "
        f"WHEN 'null' THEN NULL "
        f"WHEN 'boolean' THEN CASE WHEN CAST({member} AS text) = 'true' THEN '1' ELSE '0' END "
        f"ELSE CAST({col} AS json) ->> 'id' END END"
    )
