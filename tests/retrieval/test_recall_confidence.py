"""Contract 2: confidence scoring overrides the fusion mode's order and gate.

With CPERSONA_CONFIDENCE_ENABLED the fusion mode still picks the candidates but no longer the
order: rrf and rsf answer every query with the same rows in the same order. With it off they
differ. Every message then carries `confidence` and a `match_reason` whose signal is
`confidence` (the profile too). Spec: retrieval.md §6.4, §3.3, §7.3.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import cpersona.retrieval.scored as scored
import pytest
from recall_support import hours_before
from support.mcp_client import AGENT

pytestmark = pytest.mark.anyio

# Rows in three age groups (hours before the corpus is written): rows of a group tie on age,
# so only their cosines part them, and near-equal cosines tie on the rounded score.
CORPUS = [
    ("the deploy pipeline runs on friday", 2),
    ("deploy pipeline runs friday", 2),
    ("the deploy pipeline runs on friday night", 2),
    ("deploy keys rotate every month", 2),
    # Same words twice over, then once: equal cosines (1.0) and equal ages, so the rows tie
    # on confidence, while FTS ranks the first (more hits) above the second and the vector
    # list the second (newer) above the first: rrf and rsf fuse them in opposite orders.
    ("standup notes standup notes", 2),
    ("standup notes", 2),
    ("friday standup moved to ten", 30),
    ("the pipeline cache lives in the bucket", 30),
    ("lunch order is ramen on friday", 30),
    ("database backups run nightly", 200),
    ("staging deploy needs manual approval", 200),
    ("the release train leaves on friday afternoon", 200),
    ("backups of the staging database run weekly", 200),
    ("ramen shop near the office closes at nine", 200),
]
QUERIES = [
    "standup notes",
    "the deploy pipeline runs on friday",
    "deploy pipeline",
    "friday",
    "database backups",
    "ramen lunch",
    "staging approval",
    "release train",
    "pipeline cache bucket",
    "keys",
]


async def _answers(t, deep: bool) -> list[list[tuple[str, object]]]:
    out = []
    for q in QUERIES:
        messages = await t.messages(q, deep=deep)
        out.append([(m["content"], m.get("match_reason", {}).get("score")) for m in messages])
    return out


NOW = datetime.now(UTC).replace(microsecond=0)
# The clock of the confidence scoring, frozen an hour ahead for the rrf-vs-rsf comparison: the
# two databases are asked milliseconds apart, and a 4-decimal score may round differently
# across that gap. An hour ahead of every recall-count stamp keeps those out of the 5-minute
# recent-recall window in both databases alike.
FROZEN = NOW + timedelta(hours=1)


class _FrozenClock(datetime):
    @classmethod
    def now(cls, tz=None):  # type: ignore[override]
        return FROZEN if tz is not None else FROZEN.replace(tzinfo=None)


@pytest.fixture
def frozen(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(scored, "datetime", _FrozenClock)


async def _corpus(t) -> None:
    for content, hours in CORPUS:
        await t.store(content, timestamp=hours_before(NOW, hours))
    ep = await t.episode("friday deploy retro: pipeline was slow", keywords="deploy retro")
    # The episode boundary is the server's created_at (one-second resolution): pin it, so
    # twin databases written a second apart penalise their rows by exactly the same factor.
    with t.engine.db.atomic() as conn:
        conn.execute(
            "UPDATE episodes SET created_at = ? WHERE id = ?",
            (NOW.strftime("%Y-%m-%d %H:%M:%S"), ep),
        )


CONF = {"confidence_enabled": True, "autocut_enabled": False}


@pytest.mark.parametrize("deep", [False, True])
async def test_rrf_and_rsf_agree_under_confidence(connect, frozen, deep):
    async with (
        connect(db_path="rrf.db", recall_mode="rrf", **CONF) as rrf,
        connect(db_path="rsf.db", recall_mode="rsf", **CONF) as rsf,
    ):
        await _corpus(rrf)
        await _corpus(rsf)
        a = await _answers(rrf, deep)
        b = await _answers(rsf, deep)
    assert any(len(rows) >= 3 for rows in a)
    for q, x, y in zip(QUERIES, a, b, strict=True):
        assert [c for c, _ in x] == [c for c, _ in y], q
        assert x == y, q


async def test_rrf_and_rsf_differ_without_confidence(connect):
    async with (
        connect(db_path="rrf.db", recall_mode="rrf") as rrf,
        connect(db_path="rsf.db", recall_mode="rsf") as rsf,
    ):
        await _corpus(rrf)
        await _corpus(rsf)
        a = await _answers(rrf, True)
        b = await _answers(rsf, True)
    differ = [
        q for q, x, y in zip(QUERIES, a, b, strict=True) if [c for c, _ in x] != [c for c, _ in y]
    ]
    assert differ


async def test_every_row_carries_confidence(connect):
    async with connect(confidence_enabled=True, autocut_enabled=False) as t:
        await _corpus(t)
        await t("update_profile", {"agent_id": AGENT, "profile": "likes ramen"})
        # 50 rows in the pool let the profile through the gate (contract 7).
        await t.store_all([f"filler row {i} about nothing" for i in range(40)])
        out = await t.recall("friday deploy", limit=100)
    messages = out["messages"]
    kinds = {m.get("ref", "profile").split(":")[0] for m in messages}
    assert {"mem", "ep", "profile"} <= kinds
    for m in messages:
        reason = m["match_reason"]
        conf = m["confidence"]
        assert reason["signal"] == "confidence"
        assert reason["score"] == conf["score"] == round(conf["score"], 4)
        assert next(iter(conf)) == "age_hours" and list(conf)[-1] == "score"
        if "cosine" in conf:
            assert conf["cosine"] == round(reason["cosine"], 4)
    (profile,) = [m for m in messages if "ref" not in m]
    assert profile["content"] == "[Profile] likes ramen"
    assert profile["confidence"].get("age_unknown") is True
    assert "cosine" not in profile["confidence"]


@pytest.mark.parametrize(
    ("mode", "vector_signal", "keyword_signal"),
    [("rrf", "cosine", "rrf"), ("rsf", "rsf", "rsf"), ("cascade", "cosine", None)],
)
async def test_signal_precedence_without_confidence(
    connect, mode, vector_signal, keyword_signal, store_backend
):
    # A row the vector arm cannot see (threshold above any cosine) but FTS can.
    async with connect(recall_mode=mode, autocut_enabled=False) as t:
        await _corpus(t)
        await t.store_all([f"filler {i}" for i in range(100)])  # >=100: unscored rows pass
        messages = await t.messages("deploy pipeline runs friday", deep=True, limit=30)
    vector_rows = [m for m in messages if "match_reason" in m and "cosine" in m["match_reason"]]
    assert vector_rows
    assert {m["match_reason"]["signal"] for m in vector_rows} == {vector_signal}
    others = [m for m in messages if m not in vector_rows]
    if keyword_signal is None:
        assert others and all("match_reason" not in m for m in others)
    else:
        assert all(m["match_reason"]["signal"] == keyword_signal for m in others)
