"""The FTS5 MATCH expression (retrieval.md §4.8) and cpersona's one addition to it."""

from __future__ import annotations

import pytest
from cpersona.retrieval.query import match_expression


@pytest.mark.parametrize(
    "query, expected",
    [
        ("会議室の予約", '"会議室" OR "議室の" OR "室の予" OR "の予約"'),
        ("CVE-2024-3094 bug-183", '"CVE-2024-3094" OR "bug-183"'),
        ("go to it", ""),
        ('say "hi world"', '"say" OR """hi" OR "world""" OR "world"'),
        ("the the THE", '"the" OR "THE"'),
        ("C++ node.js", '"C++" OR "node.js"'),
    ],
)
def test_match_expression_follows_the_spec(query: str, expected: str) -> None:
    assert match_expression(query) == expected


def test_match_expression_adds_the_core_of_a_punctuated_token() -> None:
    # 2.5.x keeps only "group?", whose trigram phrase needs the "?" in the memory: the last
    # word of a question never matched (docs/quality.md). The original term stays, so the
    # expression only ever matches more rows.
    assert match_expression("Where is the support group?") == '"support" OR "group?" OR "group"'

    assert match_expression("(Alps), CVE-2024-3094.") == (
        '"(Alps)," OR "Alps" OR "CVE-2024-3094." OR "CVE-2024-3094"'
    )
    assert match_expression("会議室。") == '"会議室"'  # CJK runs are unchanged


def test_english_stopwords_are_left_out_unless_nothing_else_is_left() -> None:
    # A question's function words matched half of LoCoMo and outvoted its content words.
    assert match_expression("What did Caroline research?") == (
        '"Caroline" OR "research?" OR "research"'
    )
    assert match_expression("When was THE launch, then?") == '"launch," OR "launch"'
    assert match_expression("what was there") == '"what" OR "was" OR "there"'
    assert match_expression("どこで What 会議") == '"どこで"'  # CJK runs are never stopwords
