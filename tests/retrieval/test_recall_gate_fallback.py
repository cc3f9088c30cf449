"""Contract 8: `gate_fallback: true` marks a low-confidence lexical rescue.

Only with confidence scoring on: when every candidate falls below the quality gate but some
were found lexically and cosine-backfilled, those rows are returned instead of nothing, and
the response says so. Rows that had a native cosine are never rescued. With confidence off
the key never appears; an all-below-gate recall is simply empty. Spec: retrieval.md §9, §6.1.
"""

from __future__ import annotations

import pytest
from recall_support import IDENT, LEXICAL
from support.mcp_client import AGENT

pytestmark = pytest.mark.anyio

# Cosine ~0.19: inside the vector list (native cosine) yet below the confidence gate.
NATIVE = (
    "Security review notes: the team audited compression libraries, build scripts, "
    "release tarballs, signing keys, maintainers, mirrors, checksums and the backdoor "
    "tracked as CVE-2024-3094 was patched in staging, production, laptops and "
    "containers last week after lengthy discussion"
)
OTHERS = ["lunch order is ramen on friday", "the release train leaves on friday afternoon"]


@pytest.mark.parametrize("mode", ["rrf", "rsf", "cascade"])
async def test_rescue_fires_with_confidence(connect, mode):
    async with connect(recall_mode=mode, confidence_enabled=True) as t:
        await t.store_all([LEXICAL, *OTHERS])
        out = await t.recall(IDENT)
    assert out["gate_fallback"] is True
    (row,) = out["messages"]
    assert row["content"] == LEXICAL
    assert row["confidence"]["score"] == 0.0 and row["match_reason"]["signal"] == "confidence"
    assert 0 < row["match_reason"]["cosine"] < 0.15  # backfilled


async def test_native_cosine_rows_are_not_rescued(connect):
    async with connect(confidence_enabled=True) as t:
        await t.store_all([NATIVE, *OTHERS])
        out = await t.recall(IDENT)
        assert out == {"messages": []}
        await t.store(LEXICAL)
        out = await t.recall(IDENT)
    assert out["gate_fallback"] is True
    assert [m["content"] for m in out["messages"]] == [LEXICAL]


@pytest.mark.parametrize("mode", ["rrf", "rsf", "cascade"])
async def test_never_without_confidence(connect, mode):
    async with connect(recall_mode=mode) as t:
        await t.store_all([LEXICAL, NATIVE, *OTHERS])
        for query in (IDENT, "zebra crossing", LEXICAL, "friday"):
            for deep in (False, True):
                assert "gate_fallback" not in await t.recall(query, deep=deep)


async def test_all_below_the_gate_is_simply_empty_without_confidence(connect):
    # rrf: the lexical rows' rrf (1/61) is under the small pool's gate (m(N) * 3/61).
    async with connect() as t:
        await t.store_all([LEXICAL, NATIVE, *OTHERS])
        assert await t.recall(IDENT) == {"messages": []}
        assert (await t.recall(IDENT, deep=True))["messages"]  # half the gate lets them in


async def test_absent_when_rows_pass_the_gate(connect):
    async with connect(confidence_enabled=True) as t:
        await t.store_all([LEXICAL, f"{IDENT} patched"])
        out = await t.recall(IDENT)
    assert "gate_fallback" not in out
    assert out["messages"][-1]["content"] == f"{IDENT} patched"


async def test_the_profile_joins_a_rescue_only_when_it_passes_the_gate(connect):
    async with connect(confidence_enabled=True) as t:
        await t("update_profile", {"agent_id": AGENT, "profile": "security lead"})
        await t.store_all([LEXICAL, *OTHERS])
        small = await t.recall(IDENT)
        await t.store_all([f"pool row {i}" for i in range(50)])
        large = await t.recall(IDENT)
    assert small["gate_fallback"] is True
    assert [m["content"] for m in small["messages"]] == [LEXICAL]
    assert large["gate_fallback"] is True
    assert sorted(m["content"] for m in large["messages"]) == sorted(
        [LEXICAL, "[Profile] security lead"]
    )


async def test_a_rescue_writes_no_recall_counts(connect):
    # A recall that returned LEXICAL normally would mark it recalled (a 0.7 penalty on its
    # next confidence within 5 minutes); the rescue does not. Compare with a twin database.
    async with (
        connect(db_path="a.db", confidence_enabled=True) as a,
        connect(db_path="b.db", confidence_enabled=True) as b,
    ):
        for t in (a, b):
            await t.store_all([LEXICAL, *OTHERS])
        assert (await a.recall(IDENT))["gate_fallback"] is True
        rescued_then = (await a.messages(LEXICAL))[-1]
        fresh = (await b.messages(LEXICAL))[-1]
        again = (await a.messages(LEXICAL))[-1]
    assert rescued_then["content"] == fresh["content"] == LEXICAL
    assert rescued_then["confidence"]["score"] == pytest.approx(
        fresh["confidence"]["score"], abs=2e-4
    )
    assert again["confidence"]["score"] < fresh["confidence"]["score"]
