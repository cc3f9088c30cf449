"""The placeholder conversion: storage SQL's `?` as psycopg's `%s` (the only rewriting).

Storage statements are written once in SQL both backends run natively, with the fragments that
differ asked of the backend's operations object (storage/ops.py). What psycopg needs beyond
that is its own placeholder: each `?` outside string literals, quoted identifiers and comments
becomes `%s`, and every literal `%` becomes `%%` (psycopg reads `%` as a placeholder
everywhere, inside literals too; the caller always passes a parameter sequence, so `%%` is read
back as `%`).
"""

from __future__ import annotations

import re
from functools import lru_cache

__all__ = ["placeholders"]

_TOKEN = re.compile(
    r"""
      (?P<comment>--[^\n]*)
    | (?P<str>'(?:[^']|'')*')
    | (?P<qid>"(?:[^"]|"")*")
    | (?P<mark>\?)
    | (?P<pct>%)
    """,
    re.VERBOSE | re.DOTALL,
)


def _convert(m: re.Match[str]) -> str:
    kind = m.lastgroup
    if kind == "mark":
        return "%s"
    if kind == "pct":
        return "%%"
    if kind == "str":
        return m.group().replace("%", "%%")
    return m.group()


@lru_cache(maxsize=4096)
def placeholders(sql: str) -> str:
    """`sql` with psycopg's placeholders (cached: statements repeat)."""
    return _TOKEN.sub(_convert, sql)
