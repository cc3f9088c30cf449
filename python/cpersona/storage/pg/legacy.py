"""TEMPORARY (issue 18): SQLite's dialect rewritten for PostgreSQL, for the three storage
modules not yet rewritten in portable SQL: storage/health.py, storage/portability.py and
storage/transfer.py (their rewrite is another branch's). Nothing else may rely on it: every
other storage statement is portable SQL plus storage/ops.py, and runs with the placeholder
conversion only (storage/pg/dialect.py). `PgConnection.execute` sends a statement here only
when `needs_legacy` finds an SQLite-only construct in it. Delete this module, its functions
(storage/pg/legacy_functions.py) and its use in storage/pg/db.py once those three are merged.

What `translate` does: `INSERT OR IGNORE|REPLACE` -> `ON CONFLICT`; `RETURNING id` for
`lastrowid`; `GLOB` -> `~ sqlite_glob(...)`; `IS [NOT] b` -> `IS [NOT] DISTINCT FROM`; bare
`1`/`0` conditions -> `TRUE`/`FALSE`; two-argument `MAX`/`MIN` -> `GREATEST`/`LEAST`; casts;
`lower`/`upper` -> ASCII-only functions; placeholders.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

#: Tables whose rows have an `id` identity column (`INSERT` gains `RETURNING id`).
ID_TABLES = frozenset({"memories", "episodes", "profiles", "pending_memory_tasks"})

#: The conflict target of `INSERT OR REPLACE` per table (its PRIMARY KEY or UNIQUE key).
REPLACE_KEYS: dict[str, tuple[str, ...]] = {
    "schema_version": ("version",),
    "cpersona_meta": ("key",),
    "cpersona_migrations": ("name",),
    "cpersona_vector_model": ("tbl",),
    "cpersona_reembed": ("tbl",),
    "cpersona_reembed_vectors": ("tbl", "row_id"),
    "profiles": ("agent_id", "user_id"),
}

_TOKEN = re.compile(
    r"""
      (?P<ws>\s+)
    | (?P<comment>--[^\n]*)
    | (?P<str>'(?:[^']|'')*')
    | (?P<qid>"(?:[^"]|"")*")
    | (?P<num>\d+(?:\.\d*)?(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?)
    | (?P<word>[A-Za-z_][A-Za-z_0-9$]*)
    | (?P<op>==|!=|<>|<=|>=|\|\||::|[?%(),;.=<>+\-*/~])
    | (?P<other>.)
    """,
    re.VERBOSE | re.DOTALL,
)

#: Keywords after which a condition starts (a bare integer there is SQLite's truth value).
_COND_START = frozenset({"WHERE", "AND", "OR", "NOT", "WHEN", "HAVING", "ON"})
#: Tokens that may follow a complete condition.
_COND_END = frozenset(
    {"AND", "OR", "THEN", ")", "ORDER", "GROUP", "LIMIT", "HAVING", ";", "UNION", "ELSE", "END"}
)
#: SQLite functions returning 0/1 that cpersona uses as conditions.
_INT_BOOL_FUNCS = frozenset({"JSON_VALID"})
_RENAMED_FUNCS = {"LOWER": "sqlite_lower", "UPPER": "sqlite_upper"}
_CASTS = {"INTEGER": "BIGINT", "INT": "BIGINT", "REAL": "DOUBLE PRECISION", "BLOB": "BYTEA"}


@dataclass(frozen=True, slots=True)
class Translated:
    """A PostgreSQL statement and whether `RETURNING id` was added for `lastrowid`."""

    sql: str
    returns_id: bool


@dataclass(slots=True)
class _Tok:
    kind: str
    text: str

    @property
    def upper(self) -> str:
        return self.text.upper()


def _tokens(sql: str) -> list[_Tok]:
    return [_Tok(m.lastgroup or "other", m.group()) for m in _TOKEN.finditer(sql)]


def _code(toks: list[_Tok]) -> list[int]:
    """Indexes of the tokens that are not whitespace or comments."""
    return [i for i, t in enumerate(toks) if t.kind not in ("ws", "comment")]


def _match_paren(toks: list[_Tok], code: list[int], k: int) -> int:
    """Position in `code` of the `)` closing the `(` at code position `k`."""
    depth = 0
    for j in range(k, len(code)):
        text = toks[code[j]].text
        if text == "(":
            depth += 1
        elif text == ")":
            depth -= 1
            if depth == 0:
                return j
    raise ValueError("unbalanced parentheses in SQL")


def _top_level_commas(toks: list[_Tok], code: list[int], open_k: int, close_k: int) -> int:
    depth = 0
    commas = 0
    for j in range(open_k + 1, close_k):
        text = toks[code[j]].text
        if text == "(":
            depth += 1
        elif text == ")":
            depth -= 1
        elif text == "," and depth == 0:
            commas += 1
    return commas


@lru_cache(maxsize=4096)
def translate(sql: str) -> Translated:
    """The PostgreSQL form of one SQLite statement (cached: statements repeat)."""
    toks = _tokens(sql)
    code = _code(toks)
    on_conflict = ""
    returns_id = False
    insert_table: str | None = None
    suffix: dict[int, str] = {}

    def up(k: int) -> str:
        return toks[code[k]].upper if 0 <= k < len(code) else ""

    k = 0
    while k < len(code):
        tok = toks[code[k]]
        u = tok.upper
        if tok.kind == "op" and tok.text == "?":
            tok.text = "%s"
        elif tok.kind == "op" and tok.text == "%":
            tok.text = "%%"
        elif tok.kind == "op" and tok.text == "==":
            tok.text = "="
        elif tok.kind == "str" and "%" in tok.text:
            tok.text = tok.text.replace("%", "%%")
        elif u == "INSERT" and up(k + 1) == "OR" and up(k + 2) in ("IGNORE", "REPLACE"):
            mode = up(k + 2)
            toks[code[k + 1]].text = toks[code[k + 2]].text = ""
            _blank_ws_after(toks, code[k + 1])
            _blank_ws_after(toks, code[k + 2])
            if up(k + 3) == "INTO":
                insert_table = toks[code[k + 4]].text.strip('"').lower()
            if mode == "IGNORE":
                on_conflict = " ON CONFLICT DO NOTHING"
            else:
                on_conflict = _replace_clause(toks, code, k + 5, insert_table)
            k += 3
            continue
        elif u == "INSERT" and up(k + 1) == "INTO" and insert_table is None:
            insert_table = toks[code[k + 2]].text.strip('"').lower()
        elif u == "NOT" and up(k + 1) == "INDEXED":
            tok.text = toks[code[k + 1]].text = ""
            _blank_ws_after(toks, code[k])
            _blank_ws_after(toks, code[k + 1])
            k += 2
            continue
        elif u == "GLOB":
            # The right operand is one token or one parenthesised group.
            tok.text = "~ sqlite_glob("
            _blank_ws_after(toks, code[k])
            end = _match_paren(toks, code, k + 1) if up(k + 1) == "(" else k + 1
            suffix[code[end]] = ")"
        elif u == "IS" and up(k + 1) not in ("NULL", "TRUE", "FALSE", "NOT", "DISTINCT"):
            tok.text = "IS NOT DISTINCT FROM"
        elif u == "IS" and up(k + 1) == "NOT" and up(k + 2) not in ("NULL", "TRUE", "FALSE"):
            if up(k + 2) != "DISTINCT":
                tok.text = "IS DISTINCT FROM"
                toks[code[k + 1]].text = ""
                _blank_ws_after(toks, code[k + 1])
                k += 2
                continue
        elif tok.kind == "num" and tok.text in ("0", "1") and up(k - 1) in _COND_START:
            if (up(k + 1) in _COND_END or k + 1 == len(code)) and not _between_bound(
                toks, code, k - 1
            ):
                tok.text = "TRUE" if tok.text == "1" else "FALSE"
        elif u in _INT_BOOL_FUNCS and up(k + 1) == "(" and up(k - 1) in _COND_START:
            close = _match_paren(toks, code, k + 1)
            if up(close + 1) in _COND_END or close + 1 == len(code):
                tok.text = "(" + tok.text
                toks[code[close]].text = ") <> 0)"
        elif u in ("MAX", "MIN") and up(k + 1) == "(":
            close = _match_paren(toks, code, k + 1)
            if _top_level_commas(toks, code, k + 1, close) > 0:
                tok.text = "GREATEST" if u == "MAX" else "LEAST"
        elif u in _RENAMED_FUNCS and up(k + 1) == "(" and up(k - 1) != ".":
            tok.text = _RENAMED_FUNCS[u]
        elif u == "AS" and up(k + 1) in _CASTS and up(k + 2) == ")":
            toks[code[k + 1]].text = _CASTS[up(k + 1)]
        k += 1

    out = "".join(t.text + suffix.get(i, "") for i, t in enumerate(toks)).rstrip()
    trailing_semicolon = out.endswith(";")
    if trailing_semicolon:
        out = out[:-1].rstrip()
    out += on_conflict
    if insert_table in ID_TABLES and not re.search(r"\bRETURNING\b", out, re.IGNORECASE):
        out += " RETURNING id"
        returns_id = True
    return Translated(out, returns_id)


def _between_bound(toks: list[_Tok], code: list[int], k: int) -> bool:
    """Whether the `AND` at code position `k` is the one of `x BETWEEN a AND b`."""
    if toks[code[k]].upper != "AND":
        return False
    depth = 0
    for j in range(k - 1, -1, -1):
        text = toks[code[j]].upper
        if text == ")":
            depth += 1
        elif text == "(":
            if depth == 0:
                return False
            depth -= 1
        elif depth == 0 and text in ("AND", "OR", "WHERE", "WHEN", "ON", "HAVING"):
            return False
        elif depth == 0 and text == "BETWEEN":
            return True
    return False


def _blank_ws_after(toks: list[_Tok], i: int) -> None:
    if i + 1 < len(toks) and toks[i + 1].kind == "ws":
        toks[i + 1].text = ""


def _replace_clause(toks: list[_Tok], code: list[int], k: int, table: str | None) -> str:
    """`ON CONFLICT (key) DO UPDATE SET c = EXCLUDED.c, ...` for `INSERT OR REPLACE INTO
    table (cols)`: k is the code position just after the table name."""
    if table is None or table not in REPLACE_KEYS:
        raise ValueError(f"INSERT OR REPLACE into {table!r}: no conflict key known")
    if k >= len(code) or toks[code[k]].text != "(":
        raise ValueError("INSERT OR REPLACE needs an explicit column list")
    close = _match_paren(toks, code, k)
    cols = [
        toks[code[j]].text.strip('"').lower()
        for j in range(k + 1, close)
        if toks[code[j]].kind in ("word", "qid")
    ]
    key = REPLACE_KEYS[table]
    rest = [c for c in cols if c not in key]
    target = ", ".join(key)
    if not rest:
        return f" ON CONFLICT ({target}) DO NOTHING"
    sets = ", ".join(f"{c} = EXCLUDED.{c}" for c in rest)
    return f" ON CONFLICT ({target}) DO UPDATE SET {sets}"


_LEGACY = re.compile(
    r"""\bINSERT\s+OR\b|\bGLOB\b|\bNOT\s+INDEXED\b|==|\bsqlite_master\b
    |\b(?:json_valid|json_extract|json_type|julianday|strftime|datetime|instr|ifnull|total)\s*\(""",
    re.IGNORECASE | re.VERBOSE,
)


@lru_cache(maxsize=4096)
def needs_legacy(sql: str) -> bool:
    """Whether `sql` holds an SQLite-only construct (then only `translate` can run it)."""
    return _LEGACY.search(sql) is not None
