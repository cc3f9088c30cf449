"""Japanese (unspaced CJK) notes through the lexical channels (retrieval.md §4.7-4.8).

A CJK run of 3+ characters becomes its overlapping trigrams (FTS5 trigram MATCH); a shorter
one yields no FTS term, so the keyword channel falls back to LIKE on the raw query. Under rsf
the lexical channel's scores are min-max normalised -bm25, so the bm25-strongest row is the
best match: the LAST message.
"""

from __future__ import annotations

import pytest
from cpersona.fts.search import ranked
from cpersona.models import ProjectFilter
from cpersona.storage.search import ScopeSql
from support.mcp_client import AGENT

pytestmark = pytest.mark.anyio

NOTES = [
    "会議は明日の午前十時から始まります",
    "明日の会議資料を準備する",
    "昼食はラーメンにしよう",
    "会議室の予約を忘れずに",
    "東京オフィスの会議室は三階です",
    "新しいプロジェクトの打ち合わせは来週",
    "ﾗｰﾒﾝ屋は駅前にある",
    "CPersona の設定ファイルを確認する",
    "来週の予約は会議室ではなくカフェで",
    "室の予備の椅子は倉庫",
]
# The vector arm off (no cosine reaches the threshold): only the lexical channels answer.
LEXICAL_ONLY = {"vector_min_similarity": 100.0}


async def lexical(connect, query: str, mode: str = "rrf") -> list[dict]:
    async with connect(recall_mode=mode, **LEXICAL_ONLY) as t:
        return await t.messages(query, deep=True, limit=20)


async def _corpus(connect) -> None:
    async with connect() as t:
        await t.store_all(NOTES)


async def test_two_character_query_takes_the_like_path(connect):
    await _corpus(connect)
    got = await lexical(connect, "会議")
    assert {m["content"] for m in got} == {n for n in NOTES if "会議" in n}
    # LIKE rows carry no bm25: newest first in the keyword list, so the oldest is first.
    assert [m["content"] for m in got] == [n for n in NOTES if "会議" in n]
    assert {m["match_reason"]["signal"] for m in got} == {"rrf"}


async def test_three_character_query_takes_trigram_match(connect):
    await _corpus(connect)
    got = await lexical(connect, "会議室")
    assert {m["content"] for m in got} == {n for n in NOTES if "会議室" in n}
    assert len(got) == 3
    half_width = await lexical(connect, "ﾗｰﾒﾝ")
    assert [m["content"] for m in half_width] == ["ﾗｰﾒﾝ屋は駅前にある"]
    mixed = await lexical(connect, "CPersona の設定")
    assert [m["content"] for m in mixed] == ["CPersona の設定ファイルを確認する"]


async def test_rsf_ranks_the_bm25_strongest_row_last(connect, store_backend):
    await _corpus(connect)
    query = "会議室の予約"
    async with connect() as t:
        if t.engine.db.dialect == "postgresql":  # no FTS5: the full-text index is the arm
            scope = ScopeSql(AGENT, ProjectFilter(None), "")
            terms = ["会議室", "議室の", "室の予", "の予約"]
            found = ranked(t.engine.fts["memories"], terms, scope, "", 1000) or []
            text = {r[0]: r[1] for r in t.engine.db.query("SELECT id, content FROM memories")}
            rows = [{"content": text[i], "b": b} for i, b in found]
        else:
            rows = t.engine.db.query(
                "SELECT m.content, bm25(memories_fts) AS b FROM memories_fts "
                "JOIN memories m ON m.id = memories_fts.rowid WHERE memories_fts MATCH ? "
                "ORDER BY b, m.id",
                ['"会議室" OR "議室の" OR "室の予" OR "の予約"'],
            )
    oracle = [r["content"] for r in rows]  # bm25-strongest first
    assert len(oracle) >= 4 and len({r["b"] for r in rows}) == len(rows)
    got = await lexical(connect, query, mode="rsf")
    assert got[-1]["content"] == oracle[0]
    assert got[-1]["match_reason"] == {"signal": "rsf", "score": 1.0, "rsf": 1.0}
    # The weakest member normalises to 0 and falls under the gate; the rest keep bm25 order.
    assert 2 <= len(got) < len(oracle)
    assert [m["content"] for m in got] == oracle[: len(got)][::-1]
    rsf = [m["match_reason"]["rsf"] for m in got]
    assert rsf == sorted(rsf)


async def test_japanese_recall_with_vectors_finds_the_exact_note(connect):
    await _corpus(connect)
    async with connect(recall_mode="rsf") as t:
        got = await t.messages("明日の会議資料を準備する", agent=AGENT)
    assert got[-1]["content"] == "明日の会議資料を準備する"
