"""Queries longer than SQLite's LIKE pattern limit (50,000 UTF-8 bytes) still recall.

The LIKE fallback (retrieval.md §4.7) binds `%query%`; SQLite refuses a longer pattern with
"LIKE or GLOB pattern too complex", which recall and recall_with_context answered as a bare
error (issue 11). Past the limit the fallback tests the same substring with instr() on
ASCII-folded text (docs/compatibility.md): the same rows, so a long query recalls, and the
keyword arm still finds a memory holding the whole query, ASCII case folded like LIKE.
"""

from __future__ import annotations

import pytest
from support.mcp_client import AGENT

pytestmark = pytest.mark.anyio

LIKE_LIMIT = 50_000  # bytes: SQLITE_MAX_LIKE_PATTERN_LENGTH
# 62,500 and 60,200 UTF-8 bytes (17,200 Japanese characters): each past the limit. Neither
# reaches the memory through FTS (no 3-character run of the English query is in it; the
# Japanese words are too short for a trigram), so the keyword channel falls back to LIKE,
# while the vector arm finds the memory through their shared words and fragments.
LONG = {
    "english": "deployment orchestration " * 2500,
    "japanese": "会議 予約 " * 4300,
}
NOTES = {
    "english": ["we deployed the orchestrator", "granite meadow thistle"],
    "japanese": ["会議 予約 は 明日", "昼食はラーメンにしよう"],
}
LANGUAGES = sorted(LONG)
# Cascade with FTS off and the vector arm off (no cosine reaches the threshold): only LIKE
# answers. Its rows carry no score and pass the gate from a pool of 100 memories (§7.3).
LIKE_ONLY = {"vector_min_similarity": 100.0, "fts_enabled": False, "recall_mode": "cascade"}
FILLER = [f"filler note number {i}" for i in range(100)]


def test_long_queries_are_past_the_like_limit():
    assert all(len(("%" + q + "%").encode()) > LIKE_LIMIT for q in LONG.values())


@pytest.mark.parametrize("language", LANGUAGES)
async def test_recall_long_query_still_recalls(connect, language):
    async with connect() as t:
        await t.store_all(NOTES[language])
        got = await t.contents(LONG[language])
        assert NOTES[language][0] in got
        out = await t(
            "recall_with_context", {"agent_id": AGENT, "query": LONG[language], "limit": 5}
        )
        assert "error" not in out and "ok" not in out, out
        assert NOTES[language][0] in str(out)


@pytest.mark.parametrize("language", LANGUAGES)
async def test_recall_long_query_like_arm_matches_containing_rows(connect, language):
    query = LONG[language]
    holder = "Prefix: " + query.upper() + " :suffix"  # upper() folds ASCII only in the check
    async with connect(max_content_length=200_000, **LIKE_ONLY) as t:
        ids = await t.store_all([*FILLER, *NOTES[language], holder, query[: len(query) // 2]])
        got = await t.messages(query, limit=10)
    # Only the row that holds the whole query (LIKE folds ASCII case, not Japanese); recall
    # shows a preview of it.
    assert [m["ref"] for m in got] == [f"mem:{ids[-2]}"]
    assert got[0]["content"].startswith("Prefix: ")


@pytest.mark.parametrize("language", LANGUAGES)
async def test_recall_short_query_like_arm_unchanged(connect, language):
    short = NOTES[language][0][:9]
    async with connect(**LIKE_ONLY) as t:
        await t.store_all([*FILLER, *NOTES[language]])
        assert await t.contents(short.upper()) == [NOTES[language][0]]
