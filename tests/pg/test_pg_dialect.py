"""The SQLite -> PostgreSQL translator (storage/pg/dialect.py): what each rule rewrites, and
what it must leave alone (literals, identifiers, comparisons that only look like a rule)."""

from __future__ import annotations

import pytest
from cpersona.storage.pg.dialect import translate


def sql(statement: str) -> str:
    return translate(statement).sql


def test_placeholders_and_percent_signs() -> None:
    assert sql("SELECT a FROM t WHERE b = ? AND c LIKE '50%'") == (
        "SELECT a FROM t WHERE b = %s AND c LIKE '50%%'"
    )
    # A ? inside a string literal or a quoted identifier is not a placeholder.
    assert sql("SELECT '?', \"a?\" FROM t WHERE x = ?") == "SELECT '?', \"a?\" FROM t WHERE x = %s"
    assert sql("SELECT strftime('%s', c) FROM t") == "SELECT strftime('%%s', c) FROM t"


def test_insert_or_ignore_and_returning_id() -> None:
    t = translate("INSERT OR IGNORE INTO memories (a, b) VALUES (?, ?)")
    assert (
        t.sql == "INSERT INTO memories (a, b) VALUES (%s, %s) ON CONFLICT DO NOTHING RETURNING id"
    )
    assert t.returns_id
    # A table without an id column gains no RETURNING.
    t = translate("INSERT OR IGNORE INTO cpersona_meta(key, value) VALUES ('k', ?)")
    assert t.sql.endswith("ON CONFLICT DO NOTHING") and not t.returns_id
    # An explicit RETURNING is kept as written.
    t = translate("INSERT INTO episodes (a) VALUES (?) RETURNING a")
    assert t.sql == "INSERT INTO episodes (a) VALUES (%s) RETURNING a" and not t.returns_id


def test_insert_or_replace_updates_every_non_key_column() -> None:
    assert sql(
        "INSERT OR REPLACE INTO cpersona_reembed_vectors(tbl, row_id, embedding) "
        "SELECT ?, id, ? FROM memories WHERE id = ?"
    ) == (
        "INSERT INTO cpersona_reembed_vectors(tbl, row_id, embedding) "
        "SELECT %s, id, %s FROM memories WHERE id = %s "
        "ON CONFLICT (tbl, row_id) DO UPDATE SET embedding = EXCLUDED.embedding"
    )
    with pytest.raises(ValueError, match="no conflict key"):
        sql("INSERT OR REPLACE INTO unknown_table(a) VALUES (1)")


def test_glob_becomes_an_anchored_regex_match() -> None:
    assert sql("SELECT 1 FROM t WHERE a = ? OR a GLOB ?") == (
        "SELECT 1 FROM t WHERE a = %s OR a ~ sqlite_glob(%s)"
    )
    assert sql("SELECT 1 FROM t WHERE NOT (a GLOB (? || '*'))") == (
        "SELECT 1 FROM t WHERE NOT (a ~ sqlite_glob((%s || '*')))"
    )


def test_is_with_a_value_is_null_safe_equality() -> None:
    assert sql("SELECT 1 FROM t WHERE a IS NOT 'text' AND b IS ? AND c IS NULL") == (
        "SELECT 1 FROM t WHERE a IS DISTINCT FROM 'text' AND b IS NOT DISTINCT FROM %s "
        "AND c IS NULL"
    )
    assert sql("SELECT 1 FROM t WHERE a IS NOT NULL") == "SELECT 1 FROM t WHERE a IS NOT NULL"


def test_integer_conditions_become_booleans() -> None:
    assert sql("SELECT a FROM t WHERE 1 AND b = ? ORDER BY a") == (
        "SELECT a FROM t WHERE TRUE AND b = %s ORDER BY a"
    )
    assert sql("SELECT CASE WHEN json_valid(s) THEN 1 ELSE 0 END FROM t WHERE x = 1") == (
        "SELECT CASE WHEN (json_valid(s) <> 0) THEN 1 ELSE 0 END FROM t WHERE x = 1"
    )
    # A comparison of the integer stays one; a BETWEEN bound is not a condition.
    assert sql("SELECT a FROM t WHERE json_valid(s) = 0") == (
        "SELECT a FROM t WHERE json_valid(s) = 0"
    )
    assert sql("SELECT a FROM t WHERE x BETWEEN 0 AND 1") == (
        "SELECT a FROM t WHERE x BETWEEN 0 AND 1"
    )


def test_functions_casts_and_hints() -> None:
    assert sql("UPDATE m SET v = MAX(v, excluded.v), w = (SELECT MAX(w) FROM t)") == (
        "UPDATE m SET v = GREATEST(v, excluded.v), w = (SELECT MAX(w) FROM t)"
    )
    assert sql("SELECT CAST(a AS INTEGER), CAST(b AS REAL), CAST(c AS TEXT) FROM t") == (
        "SELECT CAST(a AS BIGINT), CAST(b AS DOUBLE PRECISION), CAST(c AS TEXT) FROM t"
    )
    assert sql("SELECT lower(a), upper(b) FROM m NOT INDEXED WHERE a == ?") == (
        "SELECT sqlite_lower(a), sqlite_upper(b) FROM m WHERE a = %s"
    )


def test_comments_and_literals_are_never_rewritten() -> None:
    statement = "SELECT 'INSERT OR IGNORE x GLOB y IS NOT 1' -- a ? here\nFROM t"
    assert sql(statement) == statement
