"""Contract 3: the episode-boundary penalty max(exp(-RATE * hours), FLOOR).

Memories stamped before the newest episode's created_at (in the query's agent / project /
channel scope) have their cosine, rrf and rsf multiplied by the factor; rows at or after the
boundary, episodes and undated rows keep factor 1. Observed by comparing each row's
`match_reason` with CPERSONA_EPISODE_PENALTY_ENABLED on and off over the same database.
Spec: retrieval.md §6.2-6.3.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import pytest
from recall_support import IDENT, LEXICAL, hours_before, iso

pytestmark = pytest.mark.anyio

HOURS = [0.0, 1.0, 24.0, 48.0, 69.0, 70.0, 100.0, 1000.0]


def factor(hours: float, rate: float = 0.01, floor: float = 0.5) -> float:
    return 1.0 if hours <= 0 else max(math.exp(-rate * hours), floor)


def note(hours: float) -> str:
    return f"checkpoint {int(hours * 10)} of the migration log"


async def reasons(t, query: str, **kw) -> dict[str, dict]:
    return {
        m["content"]: m["match_reason"] for m in await t.messages(query, deep=True, limit=50, **kw)
    }


async def _set_created_at(t, table: str, row_id: int, stamp: str) -> None:
    # No tool sets created_at (the server assigns it); a boundary in the past needs SQL.
    with t.engine.db.atomic() as conn:
        conn.execute(f"UPDATE {table} SET created_at = ? WHERE id = ?", (stamp, row_id))
    t.engine.recaller.invalidate_stats()


@pytest.mark.parametrize(("rate", "floor"), [(0.01, 0.5), (0.002, 0.3), (0.05, 0.8)])
@pytest.mark.parametrize("mode", ["rrf", "rsf", "cascade"])
async def test_factor_on_every_score(connect, mode, rate, floor):
    knobs = {"recall_mode": mode, "episode_decay_rate": rate, "episode_decay_floor": floor}
    async with (
        connect(episode_penalty_enabled=True, **knobs) as on,
        connect(episode_penalty_enabled=False, **knobs) as off,
    ):
        ep = await on.episode("migration retro", keywords="retro")
        boundary = await on.episode_created_at(ep)
        for h in HOURS:
            await on.store(note(h), timestamp=hours_before(boundary, h))
        seen = 0
        for h in HOURS:
            query = note(h)
            a, b = (await reasons(on, query))[query], (await reasons(off, query))[query]
            f = factor(h, rate, floor)
            for key in ("cosine", "rrf", "rsf"):
                assert (key in a) == (key in b)
                if key in a:
                    assert a[key] == pytest.approx(b[key] * f, rel=1e-12), (h, key)
                    seen += 1
            assert a["score"] == pytest.approx(b["score"] * f, rel=1e-12)
    assert seen >= len(HOURS)


async def test_default_factor_values(connect):
    # 24 h -> 0.7866, 48 h -> 0.6188, and the floor 0.5 from ln 2 / 0.01 = 69.3 h on.
    async with connect() as on, connect(episode_penalty_enabled=False) as off:
        ep = await on.episode("migration retro")
        boundary = await on.episode_created_at(ep)
        for h in (24.0, 48.0, 70.0):
            await on.store(note(h), timestamp=hours_before(boundary, h))
        ratios = []
        for h in (24.0, 48.0, 70.0):
            a, b = (await reasons(on, note(h)))[note(h)], (await reasons(off, note(h)))[note(h)]
            ratios.append(round(a["cosine"] / b["cosine"], 4))
    assert ratios == [0.7866, 0.6188, 0.5]


async def test_rows_at_or_after_the_boundary_episodes_and_undated_rows_keep_their_scores(connect):
    async with connect() as on, connect(episode_penalty_enabled=False) as off:
        old = await on.episode(
            "release planning for the spring launch",
            history=[{"timestamp": "2020-01-01T00:00:00Z"}, {"timestamp": "2020-01-02T00:00:00Z"}],
        )
        ep = await on.episode("unrelated weekly summary")
        boundary = await on.episode_created_at(ep)
        await on.store("release note at the boundary", timestamp=iso(boundary))
        await on.store("release note without a usable stamp", timestamp="last tuesday")
        await on.store("release note from long ago", timestamp="2020-01-01T00:00:00+09:00")
        a = await reasons(on, "release planning note spring launch")
        b = await reasons(off, "release planning note spring launch")
    assert (
        a["[Episode] release planning for the spring launch"]
        == b["[Episode] release planning for the spring launch"]
    )
    assert old > 0
    assert a["release note at the boundary"] == b["release note at the boundary"]
    assert a["release note without a usable stamp"] == b["release note without a usable stamp"]
    long_ago = a["release note from long ago"]["cosine"] / b["release note from long ago"]["cosine"]
    assert long_ago == pytest.approx(0.5, rel=1e-12)


async def test_archiving_an_episode_moves_the_boundary(tools):
    stamp = hours_before(datetime.now(UTC), 24)
    await tools.store("the vendor contract renews in march", timestamp=stamp)
    before = (await reasons(tools, "vendor contract renews"))["the vendor contract renews in march"]
    await tools.episode("quarterly planning session")
    after = (await reasons(tools, "vendor contract renews"))["the vendor contract renews in march"]
    ratio = after["cosine"] / before["cosine"]
    # The boundary is now (to the second): about 24 h before it -> exp(-0.24).
    assert ratio == pytest.approx(math.exp(-0.24), abs=2e-5)


@pytest.mark.parametrize(
    ("foreign", "recall_kw"),
    [
        ({"agent": "bob"}, {}),
        ({"project_id": "p2"}, {"project_id": "p1"}),
        ({"project_id": "p2"}, {"project_id": ""}),
        ({"channel": "c2"}, {"channel": "c1"}),
    ],
    ids=["agent", "project", "global-pool", "channel"],
)
async def test_foreign_episodes_do_not_move_the_boundary(connect, foreign, recall_kw):
    now = datetime.now(UTC).replace(microsecond=0)
    async with connect() as t, connect(episode_penalty_enabled=False) as off:
        # The in-scope boundary lies 48 h in the past; the foreign episode is newer (now).
        ep = await t.episode("in-scope retro")
        await _set_created_at(
            t, "episodes", ep, (now - timedelta(hours=48)).strftime("%Y-%m-%d %H:%M:%S")
        )
        await t.store("ledger entry one", timestamp=hours_before(now, 72))  # 24 h before B
        await t.store("ledger entry two", timestamp=hours_before(now, 24))  # after B
        first = await reasons(t, "ledger entry", **recall_kw)
        await t.episode("foreign retro", **foreign)
        second = await reasons(t, "ledger entry", **recall_kw)
        plain = await reasons(off, "ledger entry", **recall_kw)
    assert second == first
    assert first["ledger entry two"] == plain["ledger entry two"]
    assert first["ledger entry one"]["cosine"] == pytest.approx(
        plain["ledger entry one"]["cosine"] * math.exp(-0.24), rel=1e-12
    )


async def test_in_scope_episode_in_another_channel_applies_without_a_channel_filter(tools):
    now = datetime.now(UTC).replace(microsecond=0)
    await tools.store("ledger entry one", timestamp=hours_before(now, 24))
    before = await reasons(tools, "ledger entry one")
    await tools.episode("channel retro", channel="c2")
    unfiltered = await reasons(tools, "ledger entry one")
    filtered = await reasons(tools, "ledger entry one", channel="c1")
    assert filtered == before
    assert unfiltered["ledger entry one"]["cosine"] == pytest.approx(
        before["ledger entry one"]["cosine"] * math.exp(-0.24), abs=2e-5
    )


async def test_penalty_resorts_fused_rows_without_confidence(connect, store_backend):
    # An exact match stamped long before the boundary loses half its rrf; a fresh partial match
    # overtakes it. With the penalty off the exact match stays last (best).
    async with connect(episode_penalty_enabled=False) as off, connect() as on:
        now = datetime.now(UTC)
        await on.store("ledger entry alpha", timestamp=hours_before(now, 500))
        await on.store("ledger entry beta", timestamp=iso(now))
        await on.episode("retro")
        plain = await off.messages("ledger entry alpha", deep=True)
        penalised = await on.messages("ledger entry alpha", deep=True)
    assert plain[-1]["content"] == "ledger entry alpha"
    assert penalised[-1]["content"] == "ledger entry beta"
    rrf = [m["match_reason"]["rrf"] for m in penalised]
    assert rrf == sorted(rrf)


async def test_backfilled_cosines_are_penalised_too(connect):
    # Under confidence a lexical-only row gets its cosine backfilled first, then penalised.
    knobs = {"confidence_enabled": True, "autocut_enabled": False}
    async with connect(**knobs) as on, connect(episode_penalty_enabled=False, **knobs) as off:
        ep = await on.episode("security retro")
        boundary = await on.episode_created_at(ep)
        await on.store(LEXICAL, timestamp=hours_before(boundary, 24))
        a = (await reasons(on, IDENT))[LEXICAL]
        b = (await reasons(off, IDENT))[LEXICAL]
    assert a["signal"] == b["signal"] == "confidence"
    assert a["cosine"] == pytest.approx(b["cosine"] * math.exp(-0.24), rel=1e-12)
