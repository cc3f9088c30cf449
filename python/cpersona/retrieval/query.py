"""Query text rules: the full-text terms and their FTS5 MATCH rendering (§4.8), and
exclusions (§4.10).

A query becomes its terms once (`match_terms`, RecallQuery.terms); only the FTS5 channel renders
them as a MATCH expression (`render_match`), and nothing parses one back. The LIKE fallback
(§4.7) takes the raw query; storage/search.py builds its pattern.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uff66-\uff9f"
_TOKENS = re.compile(f"([{_CJK}]+)|([^\\s{_CJK}]+)")
#: Punctuation and symbols at either end of a token ("group?", "(Alps)", "CVE-2024-3094,").
_EDGES = re.compile(r"^[\W_]+|[\W_]+$")
#: Shorter runs cannot match a trigram index; they go to the keyword (LIKE) path.
FTS_MIN_TERM = 3
#: Exclusion entries shorter than this must match a row's whole text.
EXCLUDE_PREFIX_MIN = 32


#: English function words: a question's "what", "did", "when", "the" matched half the corpus
#: and outvoted its content words in BM25 (LoCoMo nDCG@10 0.452 -> 0.467 without them).
_STOP_TEXT = """a about above after again against all am an and any are as at be because been
    before being
    below between both but by can could did do does doing down during each few for from further
    had has have having he her here hers herself him himself his how i if in into is it its
    itself just me more most my myself no nor not now of off on once only or other our ours
    ourselves out over own same she should so some such than that the their theirs them
    themselves then there these they this those through to too under until up very was we were
    what when where which while who whom why will with would you your yours yourself
    yourselves"""
STOPWORDS = frozenset(_STOP_TEXT.split())


def _content_tokens(tokens: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """`tokens` without English stopwords, unless nothing else is left."""
    kept = [(c, o) for c, o in tokens if c or _EDGES.sub("", o).lower() not in STOPWORDS]
    return kept or tokens


def match_terms(query: str) -> list[str]:
    """The terms of `query`'s FTS5 MATCH expression, in order (see `match_expression`)."""
    terms: list[str] = []
    seen: set[str] = set()
    for cjk, other in _content_tokens(_TOKENS.findall(query)):
        if cjk:
            pieces = [cjk[i : i + 3] for i in range(len(cjk) - 2)]
        else:
            core = _EDGES.sub("", other)
            pieces = [t for t in dict.fromkeys((other, core)) if len(t) >= FTS_MIN_TERM]
        for piece in pieces:
            if piece not in seen:
                seen.add(piece)
                terms.append(piece)
    return terms


def match_expression(query: str) -> str:
    """The FTS5 MATCH expression for `query`, or '' when no term is long enough.

    CJK runs (no spaces between words) become every overlapping 3-character window; other
    tokens are kept whole with their punctuation (`CVE-2024-3094`). Terms are quoted, so FTS5
    syntax characters in a query are literal text, and joined with OR.

    Deviation from 2.5.x (docs/compatibility.md): a token that starts or ends in punctuation
    also contributes its core, the token without it (`group?` adds `group`), when the core
    is long enough. 2.5.x keeps only `group?`, whose trigram phrase needs the question mark
    in the memory, so the last word of every question was lost: on LoCoMo that cost FTS a
    quarter of its R@10 (docs/quality.md). The original token stays a term.

    Second deviation: English stopwords (`STOPWORDS`) are left out when the query has other
    words, so a question's function words no longer outvote its content words.
    """
    return render_match(match_terms(query))


def render_match(terms: Sequence[str]) -> str:
    """`terms` as an FTS5 MATCH expression: each quoted (its quotes doubled), joined with OR;
    '' for no term."""
    return " OR ".join('"' + t.replace('"', '""') + '"' for t in terms)


def normalise_exclusions(entries: Sequence[str]) -> list[str]:
    return [e.strip().lower() for e in entries if isinstance(e, str) and e.strip()]


def is_excluded(content: str, exclusions: Sequence[str]) -> bool:
    """Whether a candidate's text matches an exclusion (exact below 32 chars, else prefix)."""
    if not exclusions:
        return False
    text = content.strip().lower()
    if not text:
        return False
    for e in exclusions:
        if len(e) < EXCLUDE_PREFIX_MIN:
            if text == e:
                return True
        elif text.startswith(e) or e.startswith(text):
            return True
    return False
