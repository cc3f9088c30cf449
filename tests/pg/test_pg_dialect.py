"""Storage SQL on PostgreSQL: the placeholder conversion (the only rewriting left) and the
fragments of storage/ops.py, each checked against what SQLite answers for the same SQL."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from cpersona.storage.ops import POSTGRES, SQLITE, glob_escape
from cpersona.storage.pg.dialect import placeholders
from hypothesis import example, given, settings
from hypothesis import strategies as st
from pg_support import drop_database, fresh_database


def test_placeholders_and_percent_signs() -> None:
    assert placeholders("SELECT a FROM t WHERE b = ? AND c LIKE '50%'") == (
        "SELECT a FROM t WHERE b = %s AND c LIKE '50%%'"
    )
    # A ? inside a string literal, a quoted identifier or a comment is no placeholder.
    assert placeholders("SELECT '?', \"a?\" FROM t WHERE x = ? -- why?\n") == (
        "SELECT '?', \"a?\" FROM t WHERE x = %s -- why?\n"
    )
    assert placeholders("SELECT a % ? FROM t") == "SELECT a %% %s FROM t"


def test_nothing_else_is_rewritten() -> None:
    statement = "INSERT OR IGNORE INTO t (a) SELECT lower(b) FROM u WHERE 1 AND c GLOB d"
    assert placeholders(statement) == statement


@pytest.fixture(scope="module")
def pair() -> Iterator[tuple[sqlite3.Connection, Any]]:
    """SQLite in memory and a PostgreSQL database, shared by the module's examples."""
    url = fresh_database()
    lite = sqlite3.connect(":memory:")
    pg = psycopg.connect(url, autocommit=True)
    pg.execute("SET TIME ZONE 'UTC'")
    yield lite, pg
    pg.close()
    lite.close()
    drop_database(url)


def both(pair: tuple[sqlite3.Connection, Any], make: Any, *params: object) -> tuple[Any, Any]:
    """The one value of `SELECT <make(ops)>` on SQLite and on PostgreSQL."""
    lite, pg = pair
    (a,) = lite.execute(f"SELECT {make(SQLITE)}", params).fetchone()
    (b,) = pg.execute(placeholders(f"SELECT {make(POSTGRES)}"), params).fetchone()
    return a, b


_TEXT = st.text(alphabet="ab*?[]^-.\\%_Aé\n", max_size=8)


@settings(max_examples=150, deadline=None)
@given(text=_TEXT, pattern=_TEXT)
# A reversed range (PostgreSQL refused it: "invalid character range"), a `-` last, a `]`
# first, a negated range, a range after a range.
@example(text="?", pattern="[?-.]")
@example(text=".", pattern="[^?-.]")
@example(text="-", pattern="[a-]")
@example(text="]", pattern="[]a]")
@example(text="b", pattern="[^a-c]")
@example(text="e", pattern="[a-c-e]")
def test_glob_match_is_sqlites_glob(pair: Any, text: str, pattern: str) -> None:
    lite, pg = pair
    want = lite.execute(f"SELECT {SQLITE.glob_match('?')}", (text, pattern)).fetchone()[0]
    got = pg.execute(
        placeholders(f"SELECT {POSTGRES.glob_match('?')}"), (text, POSTGRES.glob_param(pattern))
    ).fetchone()[0]
    assert bool(want) == got


@settings(max_examples=100, deadline=None)
@given(text=_TEXT, prefix=_TEXT)
def test_prefix_match_is_a_literal_prefix(pair: Any, text: str, prefix: str) -> None:
    lite, pg = pair
    want = text.startswith(prefix)
    sql = f"SELECT {SQLITE.prefix_match('?')}"
    assert bool(lite.execute(sql, (text, SQLITE.prefix_param(prefix))).fetchone()[0]) is want
    sql = placeholders(f"SELECT {POSTGRES.prefix_match('?')}")
    assert pg.execute(sql, (text, POSTGRES.prefix_param(prefix))).fetchone()[0] is want
    assert glob_escape("a*b") == "a[*]b"


@settings(max_examples=100, deadline=None)
@given(text=st.text(alphabet="aZé İß\n", max_size=6), needle=st.text(alphabet="aZé", max_size=2))
def test_folding_and_position_agree(pair: Any, text: str, needle: str) -> None:
    a, b = both(pair, lambda o: o.ascii_lower("?"), text)
    assert a == b
    a, b = both(pair, lambda o: o.ascii_upper("?"), text)
    assert a == b
    a, b = both(pair, lambda o: o.position("?", "?"), needle, text)
    assert a == b


@pytest.mark.parametrize(
    "source",
    ['{"id": "u1", "x": 1}', '{"id": 7}', '{"id": true}', '{"id": null}', '{"x": 1}', "[1]", "x"],
)
def test_json_text_agrees(pair: Any, source: str) -> None:
    lite, pg = pair
    sql = "SELECT {} FROM (SELECT CAST(? AS TEXT) AS v) AS s"
    (a,) = lite.execute(sql.format(SQLITE.json_text("s.v", "id")), (source,)).fetchone()
    (b,) = pg.execute(
        placeholders(sql.format(POSTGRES.json_text("s.v", "id"))), (source,)
    ).fetchone()
    if a is None or b is None:
        assert a is b is None
    elif source == '{"id": true}':  # SQLite answers 1, PostgreSQL true (docs/compatibility.md)
        assert (a, b) == ("1", "true")
    else:
        assert a == b


def test_greatest_least_blob_and_now(pair: Any) -> None:
    assert both(pair, lambda o: o.greatest("?", "?"), 3, 5) == (5, 5)
    assert both(pair, lambda o: o.least("?", "?"), 3, 5) == (3, 3)
    a, b = both(pair, lambda o: o.blob("?"), "ab")
    assert bytes(a) == bytes(b) == b"ab"
    a, b = both(pair, lambda o: o.now())
    assert len(a) == len(b) == 19 and a[:10] == b[:10] and a[10] == b[10] == " "


def test_age_seconds_of_a_stamp(pair: Any) -> None:
    lite, pg = pair
    sql = "SELECT {} FROM (SELECT CAST(? AS TEXT) AS v) AS s"
    for stamp in ("2000-01-01 00:00:00", "2000-01-01T00:00:00+01:00", "not a time"):
        (a,) = lite.execute(sql.format(SQLITE.age_seconds("s.v")), (stamp,)).fetchone()
        (b,) = pg.execute(
            placeholders(sql.format(POSTGRES.age_seconds("s.v"))), (stamp,)
        ).fetchone()
        if a is None:
            assert b is None
        else:
            assert abs(a - float(b)) < 60


def test_table_exists(pair: Any) -> None:
    lite, pg = pair
    lite.execute("CREATE TABLE IF NOT EXISTS present (a)")
    pg.execute("CREATE TABLE IF NOT EXISTS present (a int)")
    for name, want in (("present", True), ("absent", False)):
        assert (lite.execute(SQLITE.table_exists(), (name,)).fetchone() is not None) is want
        found = pg.execute(placeholders(POSTGRES.table_exists()), (name,)).fetchone()
        assert (found is not None) is want
