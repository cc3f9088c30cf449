"""The full-text index against FTS5 (the oracle) on generated corpora and queries.

Every comparison is exact: the same ids in the same order with the same bm25 doubles, since
the index evaluates FTS5's own expression over the same counts (docs/fts-index.md).
"""

from __future__ import annotations

import random

import pytest
from cpersona.storage import open_database
from fts_support import HAS_CORE, WORDS, fts_index, index_cases, indexed, oracle, scope
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytestmark = pytest.mark.skipif(not HAS_CORE, reason="the full-text index needs the Rust core")

text_st = st.lists(st.sampled_from(WORDS), max_size=12).map(" ".join) | st.text(max_size=40)
ops_st = st.lists(
    st.tuples(
        st.sampled_from(["put", "put", "put", "update", "delete"]),
        text_st,
        st.sampled_from(["a", "b"]),
        st.sampled_from(["", "p"]),
        st.sampled_from(["", "c"]),
    ),
    min_size=1,
    max_size=40,
)


def _apply(db, ops, table):
    rng = random.Random(len(ops))
    with db.atomic() as conn:
        for op, text, agent, project, channel in ops:
            ids = [r[0] for r in conn.execute(f"SELECT id FROM {table}")]
            if op == "put" or not ids:
                if table == "memories":
                    conn.execute(
                        "INSERT INTO memories(agent_id, project_id, channel, content, "
                        "timestamp) VALUES (?, ?, ?, ?, '') ON CONFLICT DO NOTHING",
                        (agent, project, channel, text),
                    )
                else:
                    conn.execute(
                        "INSERT INTO episodes(agent_id, project_id, channel, summary, keywords) "
                        "VALUES (?, ?, ?, ?, ?)",
                        (agent, project, channel, text, text[::-1][:8]),
                    )
            elif op == "update":
                col = "content" if table == "memories" else "summary"
                conn.execute(
                    f"UPDATE OR IGNORE {table} SET {col} = ?, agent_id = ? WHERE id = ?",
                    (text, agent, rng.choice(ids)),
                )
            else:
                conn.execute(f"DELETE FROM {table} WHERE id = ?", (rng.choice(ids),))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(**index_cases(ops_st))
def test_index_returns_what_fts5_returns(tmp_path_factory, first, then, queries, table, limit):
    path = tmp_path_factory.mktemp("fts") / "db.sqlite"
    db = open_database(str(path))
    index = fts_index(db, table)
    try:
        _apply(db, first, table)
        index.sync()  # writes before and after the first load, applied from the log
        _apply(db, then, table)
        for q in queries:
            for sc in (scope("a"), scope("b", "p"), scope("a", "", "c"), scope("b", None, "c")):
                assert indexed(index, q, sc, limit) == oracle(db, table, q, sc, limit), q
        assert index.verify() == []
    finally:
        index.close()
        db.close()
