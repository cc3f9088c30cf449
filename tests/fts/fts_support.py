"""Helpers of the full-text index tests: a database, rows written through SQL, and the two
answers compared (the index's and FTS5's, the oracle)."""

from __future__ import annotations

from typing import Any

from cpersona import _backend
from cpersona.fts.index import FtsIndex
from cpersona.fts.search import ranked
from cpersona.models import ProjectFilter
from cpersona.retrieval.query import match_expression, match_terms
from cpersona.storage import Database
from cpersona.storage import search as sql
from cpersona.storage.error_kinds import OperationalError
from cpersona.storage.search import ScopeSql
from hypothesis import strategies as st

kernels = _backend.from_environment()

HAS_CORE = hasattr(kernels, "FtsIndex")

# Words that overlap as substrings, in several scripts, with FTS5 syntax and edge characters.
WORDS = [
    "the",
    "then",
    "there",
    "hen",
    "when",
    "maybe",
    "May",
    "MAYBE",
    "promotion",
    "decided",
    "load",
    "hiring",
    "aaa",
    "aaaa",
    "AaA",
    "group?",
    "(Alps)",
    "CVE-2024-3094",
    'say"hi"',
    "NEAR(x)",
    "a*b",
    "col:val",
    "^start",
    "x-y-z",
    "東京都",
    "東京タワー",
    "京都",
    "日本語",
    "のテキスト",
    "テキスト",
    "🙂🙂🙂",
    "emoji🙂x",
    "İstanbul",
    "ǅemal",
    "straße",
    "STRASSE",
    "Ωmega",
    "ωmega",
    "\uffff\uffff\uffff",
    "ab",
    "x",
    "",
    "  ",
    "café",
    "CAFÉ",
]
#: A query: a run of those words, or any text (which may hold no term at all).
query_text = st.lists(st.sampled_from(WORDS), min_size=1, max_size=6).map(" ".join) | st.text(
    max_size=20
)


def index_cases(ops: st.SearchStrategy[Any]) -> dict[str, st.SearchStrategy[Any]]:
    """The case space of the index-against-oracle properties (`@given(**index_cases(ops))`):
    a corpus written by `ops`, then more writes, queries over one table with one limit."""
    return {
        "first": ops,
        "then": ops,
        "queries": st.lists(query_text, min_size=1, max_size=4),
        "table": st.sampled_from(["memories", "episodes"]),
        "limit": st.sampled_from([1, 3, 10, 50]),
    }


def fts_index(db: Database, table: str) -> FtsIndex:
    return FtsIndex(db, table, kernels.FtsIndex)


def oracle(
    db: Database, table: str, query: str, scope: ScopeSql, limit: int, source: str = ""
) -> list[tuple[int, float]] | None:
    """FTS5's answer: the statement the pipeline runs without the index (None: it failed)."""
    match = match_expression(query)
    if not match:
        return []
    try:
        if table == "memories":
            hits = sql.memory_fts(db, scope, source, match, limit)
        else:
            hits = sql.episode_fts(db, scope, match, limit)  # type: ignore[assignment]
    except OperationalError:  # the storage layer's kind of FTS5's refusal (storage/error_kinds.py)
        return None
    return [(h.id, h.bm25) for h in hits]  # type: ignore[misc]


def indexed(
    index: FtsIndex, query: str, scope: ScopeSql, limit: int, source: str = ""
) -> list[tuple[int, float]] | None:
    terms = match_terms(query)
    if not terms:
        return []
    got = ranked(index, terms, scope, source, limit)
    if got is None and index.healing:
        # A large table's first search starts its rebuild in the background (FTS5 answers
        # that search): the index's own answer is the one compared here.
        index.wait_for_healing()
        got = ranked(index, terms, scope, source, limit)
    if any("\x00" in t for t in terms):
        assert got is None  # FTS5 answers (with its error): docs/fts-index.md
        return None
    assert got is not None, "the index declined to answer"
    return got


def scope(agent: str, project: str | None = None, channel: str = "") -> ScopeSql:
    return ScopeSql(agent, ProjectFilter(project), channel)
