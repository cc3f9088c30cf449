"""The retrieval settings of retrieval.md §17 not covered by a contract module.

Each test shows the variable changes what it claims (or, for the scan chunk size, that it
changes nothing observable). Covered elsewhere: the window, reach and far limit
(test_recall_window), the episode penalty (test_recall_episode_penalty), autocut
(test_recall_autocut), the confidence weights (test_recall_confidence_knobs), the preview
cap (test_recall_preview), the advisory (test_recall_degraded), the external-context mode
(test_recall_with_context). Calibration variables belong to test_calibration*.
"""

from __future__ import annotations

import pytest
from recall_support import IDENT, LEXICAL
from support.mcp_client import AGENT

pytestmark = pytest.mark.anyio

NOTES = [
    "the deploy pipeline runs on friday",
    "deploy keys rotate every month",
    "the pipeline cache lives in the bucket",
    "friday standup moved to ten",
    "staging deploy needs manual approval",
    "the release train leaves on friday afternoon",
    "deploy pipeline runs friday",
]


async def _corpus(connect, notes=NOTES, **settings) -> None:
    async with connect(**settings) as t:
        await t.store_all(notes)


async def answer(connect, query: str, **settings) -> list[dict]:
    kw = {k: settings.pop(k) for k in ("deep", "limit") if k in settings}
    async with connect(**settings) as t:
        return await t.messages(query, deep=kw.get("deep", True), limit=kw.get("limit", 10))


async def test_recall_mode_picks_the_fusion(connect):
    await _corpus(connect)
    got = {
        mode: await answer(connect, "deploy pipeline", recall_mode=mode)
        for mode in ("rrf", "rsf", "cascade")
    }
    assert {m["match_reason"]["signal"] for m in got["rsf"]} == {"rsf"}
    assert all("rrf" in m["match_reason"] for m in got["rrf"])
    assert all(set(m["match_reason"]) == {"signal", "score", "cosine"} for m in got["cascade"])


async def test_library_max_limit_clamps_the_limit(connect):
    await _corpus(connect)
    assert len(await answer(connect, "deploy pipeline friday", limit=10)) >= 4
    clamped = await answer(connect, "deploy pipeline friday", limit=10, recall_library_max_limit=2)
    full = await answer(connect, "deploy pipeline friday", limit=2)
    assert clamped == full and len(clamped) == 2


async def test_scan_chunk_rows_changes_nothing(connect):
    # One corpus and one reference answer per query serve every chunk size (the setting only
    # changes how the scan is cut, so each size is compared with the same unchunked answer).
    await _corpus(connect, NOTES + [f"deploy note {i}" for i in range(12)])
    window = {"limit": 20, "max_memories": 9, "vector_reach": 15}
    for query in ("deploy pipeline", "friday", "deploy note 3"):
        base = await answer(connect, query, limit=20)
        windowed = await answer(connect, query, **window)
        for chunk in (1, 2, 3, 5, 7, 8):
            got = await answer(connect, query, limit=20, vector_scan_chunk_rows=chunk)
            assert got == base, (query, chunk)
            got = await answer(connect, query, **window, vector_scan_chunk_rows=chunk)
            assert got == windowed, (query, chunk)


async def test_vector_min_similarity_is_the_vector_threshold(connect):
    await _corpus(connect)
    cascade = {"recall_mode": "cascade", "autocut_enabled": False}
    base = await answer(connect, "deploy pipeline friday", **cascade)
    cosines = [m["match_reason"]["cosine"] for m in base]
    assert len(cosines) >= 3
    # cascade: a row survives iff cosine >= T.
    cut = sorted(cosines)[len(cosines) // 2]
    got = await answer(connect, "deploy pipeline friday", vector_min_similarity=cut, **cascade)
    assert [m["match_reason"]["cosine"] for m in got] == [c for c in cosines if c >= cut]
    assert (
        await answer(connect, "deploy pipeline friday", vector_min_similarity=1.5, **cascade) == []
    )


async def test_rrf_threshold_factor_scales_the_threshold_in_fusion(connect):
    await _corpus(connect)
    base = await answer(connect, "deploy pipeline")  # T = 0.3 * 0.5 = 0.15
    vector = {
        m["content"]: m["match_reason"]["cosine"] for m in base if "cosine" in m["match_reason"]
    }
    assert min(vector.values()) < 0.3 <= max(vector.values())
    strict = await answer(connect, "deploy pipeline", rrf_threshold_factor=1.0)  # T = 0.3
    kept = {m["content"]: m["match_reason"].get("cosine") for m in strict}
    for content, cosine in vector.items():
        if cosine >= 0.3:
            assert kept[content] == cosine
        else:
            assert kept.get(content) is None  # no vector vote (maybe a keyword row)


async def test_rrf_k(connect):
    await _corpus(connect)
    for k in (1, 60, 1000):
        got = await answer(connect, "staging deploy needs manual approval", rrf_k=k)
        best = got[-1]
        assert best["content"] == "staging deploy needs manual approval"
        # Rank 0 in the vector list and in the keyword list.
        assert best["match_reason"]["rrf"] == pytest.approx(2 / (k + 1), rel=1e-12)


async def test_rrf_k_scales_the_gate_of_keyword_rows(connect):
    # A keyword-only row (1/(k+1)) against the heuristic gate m * 3/(k+1): the ratio does not
    # depend on k, so k alone never lets it in or out.
    await _corpus(connect, [*NOTES, LEXICAL])
    for k in (1, 60, 1000):
        got = {m["content"]: m["match_reason"] for m in await answer(connect, IDENT, rrf_k=k)}
        assert got[LEXICAL] == {"signal": "rrf", "score": 1 / (k + 1), "rrf": 1 / (k + 1)}
        assert await answer(connect, IDENT, rrf_k=k, deep=False) == []


async def test_fused_gate_enabled(connect):
    await _corpus(connect)

    async def run(enabled: bool) -> list[str]:
        async with connect(recall_mode="rsf", fused_gate_enabled=enabled) as t:
            # A calibrated rsf gate for this agent (calibration itself is tested elsewhere).
            t.engine.thresholds.agent_fused_gates[AGENT] = 0.99
            t.engine.thresholds.fused_gate_signal = "rsf"
            return [m["content"] for m in await t.messages("deploy pipeline friday")]

    gated, heuristic = await run(True), await run(False)
    assert len(heuristic) >= 2
    assert gated == heuristic[-1:]  # only the best (rsf 1.0) reaches 0.99
    async with connect(recall_mode="rsf") as t:
        t.engine.thresholds.agent_fused_gates[AGENT] = 0.99
        t.engine.thresholds.fused_gate_signal = "cosine"  # another signal: heuristic applies
        assert [m["content"] for m in await t.messages("deploy pipeline friday")] == heuristic


@pytest.mark.parametrize(
    ("settings", "fresh"),
    [({}, False), ({"scope_stats_cache": False}, True), ({"scope_stats_ttl_seconds": 0.0}, True)],
    ids=["cached", "no-cache", "ttl-0"],
)
async def test_scope_stats_cache(connect, settings, fresh):
    # Pool counts are cached per scope; another process's writes show after the TTL. The
    # profile (pool >= 50) makes the cached count visible.
    async with connect(**settings) as reader, connect() as writer:
        await writer("update_profile", {"agent_id": AGENT, "profile": "likes tea"})
        await writer.store_all([f"pool row {i}" for i in range(49)])
        assert await reader.contents("zebra crossing") == []
        await writer.store("the fiftieth row")
        seen = await reader.contents("zebra crossing")
        await reader.store("own write")  # invalidates at once
        after_own = await reader.contents("zebra crossing")
    assert seen == (["[Profile] likes tea"] if fresh else [])
    assert after_own == ["[Profile] likes tea"]


@pytest.mark.parametrize("mode", ["rrf", "rsf", "cascade"])
async def test_fts_enabled(connect, mode, store_backend):
    notes = [*NOTES, LEXICAL]
    if mode == "cascade":
        notes += [f"filler {i}" for i in range(100)]  # a pool of 100: unscored rows pass
    results = {}
    for enabled in (True, False):
        path = f"fts-{enabled}.db"
        await _corpus(connect, notes, db_path=path, fts_enabled=enabled)
        async with connect(db_path=path, fts_enabled=enabled, recall_mode=mode) as t:
            await t.episode(f"{IDENT} retro", keywords="security")
            results[enabled] = [m["content"] for m in await t.messages(IDENT, deep=True)]
            lexical_episode = [m["content"] for m in await t.messages("security", deep=True)]
        assert ("[Episode] CVE-2024-3094 retro" in lexical_episode) is enabled
    assert LEXICAL in results[True]
    if mode == "cascade":
        # No FTS: the keyword fill falls back to LIKE.
        assert LEXICAL in results[False]
    else:
        # No FTS under fusion: no keyword channel at all (no LIKE either).
        assert LEXICAL not in results[False]
