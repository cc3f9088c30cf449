"""The full-text index against FTS5 on real text: every LoCoMo and JSQuAD question (English
conversation turns, Japanese paragraphs) gets the same top 50, in the same order, with the same
bm25 values. Skipped when the licensed data is absent (it is never copied into the repo)."""

from __future__ import annotations

from pathlib import Path

import pytest
from cpersona.storage import open_database
from fts_support import HAS_CORE, fts_index, indexed, oracle, scope

from benches.quality import datasets

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not HAS_CORE, reason="the full-text index needs the Rust core"),
]


def corpus(name: str) -> datasets.Corpus:
    try:
        return datasets.locomo() if name == "locomo" else datasets.jsquad()
    except FileNotFoundError:
        pytest.skip(f"no {name} data in {datasets.data_dir()}")


@pytest.mark.parametrize("name", ["locomo", "jsquad"])
def test_top_50_equals_fts5_for_every_question(tmp_path: Path, name: str) -> None:
    data = corpus(name)
    db = open_database(str(tmp_path / f"{name}.db"))
    try:
        with db.atomic() as conn:
            conn.executemany(
                "INSERT OR IGNORE INTO memories(agent_id, msg_id, content, timestamp) "
                "VALUES (?, ?, ?, ?)",
                [(d.agent, d.key, d.content, d.timestamp or "") for d in data.docs],
            )
            conn.executemany(
                "INSERT INTO episodes(agent_id, summary, keywords, start_time, end_time) "
                "VALUES (?, ?, '', ?, ?)",
                [(e.agent, e.summary, e.start, e.end) for e in data.episodes],
            )
        tables = ["memories", "episodes"] if data.episodes else ["memories"]
        for table in tables:
            index = fts_index(db, table)
            differing = []
            for q in data.queries:
                sc = scope(q.agent)
                if indexed(index, q.text, sc, 50) != oracle(db, table, q.text, sc, 50):
                    differing.append(q.text)
            assert differing == [], f"{len(differing)} of {len(data.queries)} differ"
            index.close()
    finally:
        db.close()
