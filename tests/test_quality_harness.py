"""The quality harness (benches/quality) on a tiny synthetic corpus: no licensed data, no model."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
from cpersona.embedding.hashing import HashingProvider

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benches.quality import datasets, metrics, run
from benches.quality.harness import Config, load, matrix
from benches.quality.harness import run as run_queries
from benches.quality.vectors import DiskCachedProvider

TOPICS = [
    ("hiking", "We went hiking in the Alps and the glacier view was stunning."),
    ("pottery", "She signed up for a pottery class to make ceramic bowls."),
    ("adoption", "Caroline researched adoption agencies for a long afternoon."),
    ("violin", "He practised the violin concerto before the recital."),
    ("garden", "The tomatoes in the garden finally turned red."),
    ("sushi", "They ate sushi at the harbour restaurant on Friday."),
    ("camping", "Our camping trip was cancelled because of the thunderstorm."),
    ("painting", "Melanie painted a lake sunrise with watercolours."),
]


def synthetic() -> datasets.Corpus:
    corpus = datasets.Corpus("locomo")
    for agent in ("a1", "a2"):
        for i, (key, text) in enumerate(TOPICS):
            stamp = f"2023-05-0{1 + i % 8}T10:0{i}:00Z"
            corpus.docs.append(datasets.Doc(f"{agent}-{key}", agent, f"{agent}: {text}", stamp))
        # Filler: below ~35 rows per agent the heuristic gate drops single-list FTS rows.
        for i in range(40):
            stamp = f"2023-04-{1 + i % 28:02d}T09:00:00Z"
            text = f"{agent}: routine note {i} about errands, chores and the weekly plan"
            corpus.docs.append(datasets.Doc(f"{agent}-note{i}", agent, text, stamp))
        corpus.episodes.append(
            datasets.Episode(
                agent, "They talked about hobbies.", "2023-05-01T10:00:00Z", "2023-05-08T10:00:00Z"
            )
        )
    ask = [
        ("a1", "Where did we go hiking near the glacier?", "a1-hiking", "single-hop"),
        ("a1", "What did Caroline research about adoption agencies?", "a1-adoption", "temporal"),
        ("a2", "What did Melanie paint with watercolours?", "a2-painting", "single-hop"),
        ("a2", "Why was the camping trip cancelled?", "a2-camping", "multi-hop"),
    ]
    for agent, text, key, group in ask:
        corpus.queries.append(datasets.Query(agent, text, group, frozenset({key})))
    corpus.queries.append(datasets.Query("a1", "What is the capital of Mongolia?", "adversarial"))
    return corpus


def test_metrics_on_hand_made_lists() -> None:
    relevant = frozenset({"b", "d"})
    ranked = ["a", "b", "c", "d"]
    assert metrics.recall_at(ranked, relevant, 1) == 0.0
    assert metrics.recall_at(ranked, relevant, 2) == 0.5
    assert metrics.recall_at(ranked, relevant, 10) == 1.0
    assert metrics.mrr_at(ranked, relevant) == 0.5
    ideal = 1 + 1 / math.log2(3)
    dcg = 1 / math.log2(3) + 1 / math.log2(5)
    assert metrics.ndcg_at(ranked, relevant) == pytest.approx(dcg / ideal)
    assert metrics.ndcg_at(["b", "d"], relevant) == pytest.approx(1.0)


@pytest.mark.anyio
@pytest.mark.parametrize("embedder", ["none", "hashing"])
async def test_harness_loads_through_tools_and_reads_best_last(
    tmp_path: Path, embedder: str
) -> None:
    corpus = synthetic()
    provider = None
    if embedder != "none":
        provider = DiskCachedProvider(HashingProvider(), tmp_path / "cache")
    config = Config(embedder, "rrf")
    refs = await load(corpus, config, provider, tmp_path / "template", episodes=False)
    assert len(refs) == len(corpus.docs) and all(r.startswith("mem:") for r in refs.values())
    result = await run_queries(
        corpus, config, provider, tmp_path / "template", refs, tmp_path / "run"
    )
    groups = result.groups
    assert set(groups) == {"single-hop", "temporal", "multi-hop", "adversarial"}
    # Every question names its memory in distinctive words: FTS ranks it first, and recall
    # returns it LAST; reading the answer the wrong way round would put it at the bottom.
    single = groups["single-hop"].row()
    assert single["R@1"] == 1.0 and single["MRR@10"] == 1.0 and single["n"] == 2
    assert groups["adversarial"].row()["n"] == 1
    assert not (tmp_path / "run").exists()  # each configuration's copy is removed


def test_disk_cache_serves_a_rerun(tmp_path: Path) -> None:
    first = DiskCachedProvider(HashingProvider(), tmp_path)
    first.prime(["alpha", "beta"], "passage")
    a = first.embed(["alpha", "gamma"], kind="passage")
    first.save()
    assert first.computed == 3
    again = DiskCachedProvider(HashingProvider(), tmp_path)
    b = again.embed(["alpha", "gamma"], kind="passage")
    assert again.computed == 0 and (a == b).all()
    again.embed(["alpha"], kind="query")  # another kind is another vector
    assert again.computed == 1


def test_summary_tables_and_check(tmp_path: Path) -> None:
    tally = metrics.Tally()
    tally.add(["x"], frozenset({"x"}), 1)
    probe = metrics.Tally()
    probe.add([], frozenset(), 0)
    from benches.quality.harness import RunResult

    config = Config("none")
    results = {
        config.label: {
            "locomo": RunResult(config, {"single-hop": tally, "adversarial": probe}, 0.1),
            "jsquad": RunResult(config, {"jsquad": tally}, 0.1),
        }
    }
    summary = run.summarise(results)
    assert summary[config.label]["mean nDCG@10"] == 1.0
    text = run.tables(summary, {})
    assert "| none fts rrf |" in text and "100%" in text
    doc = tmp_path / "quality.md"
    doc.write_text('<!-- quick-baseline\n{"none fts rrf | jsquad R@1": 0.99}\n-->\n')
    assert run.check(summary, doc) == []
    doc.write_text('<!-- quick-baseline\n{"none fts rrf | locomo R@1": 1.04}\n-->\n')
    assert len(run.check(summary, doc)) == 1


def test_matrix_covers_every_arm() -> None:
    labels = [c.label for c in matrix(["local-minilm", "local-e5"])]
    assert labels[:2] == ["none fts rrf", "none fts rrf +conf"]
    for name in ("minilm", "e5"):
        for arm in ("alone", "rrf", "rsf"):
            assert f"{name} {arm}" in labels and f"{name} {arm} +conf" in labels


@pytest.mark.anyio
async def test_harness_archives_sessions_as_episodes(tmp_path: Path) -> None:
    import sqlite3

    corpus = synthetic()
    await load(corpus, Config("none"), None, tmp_path / "template", episodes=True)
    with sqlite3.connect(tmp_path / "template" / "bench.db") as db:
        (count,) = db.execute("SELECT COUNT(*) FROM episodes").fetchone()
    assert count == len(corpus.episodes) == 2


@pytest.mark.anyio
async def test_lived_replay_dates_each_session_as_the_servers_clock_would(tmp_path: Path) -> None:
    import sqlite3

    corpus = datasets.Corpus("locomo")
    for agent in ("a1", "a2"):
        for n, day in ((1, "2023-05-01"), (2, "2023-06-10")):
            for i in range(3):
                stamp = f"{day}T10:0{30 * i // 60}:{(30 * i) % 60:02d}Z"
                text = f"{agent}: session {n} turn {i} about the garden"
                corpus.docs.append(datasets.Doc(f"{agent}-{n}-{i}", agent, text, stamp, f"s{n}"))
            corpus.episodes.append(
                datasets.Episode(
                    agent,
                    f"Session {n} about the garden.",
                    f"{day}T10:00:00Z",
                    f"{day}T10:01:00Z",
                    f"s{n}",
                )
            )
    refs = await load(corpus, Config("none"), None, tmp_path / "t", replay="lived")
    with sqlite3.connect(tmp_path / "t" / "bench.db") as db:
        episodes = db.execute(
            "SELECT agent_id, summary, created_at FROM episodes ORDER BY id"
        ).fetchall()
        created = dict(db.execute("SELECT id, created_at FROM memories").fetchall())
    # Each session archived when it ended (a minute after its last turn), in stored order.
    assert episodes == [
        ("a1", "Session 1 about the garden.", "2023-05-01 10:02:00"),
        ("a1", "Session 2 about the garden.", "2023-06-10 10:02:00"),
        ("a2", "Session 1 about the garden.", "2023-05-01 10:02:00"),
        ("a2", "Session 2 about the garden.", "2023-06-10 10:02:00"),
    ]
    first = created[int(refs["a1-1-0"].removeprefix("mem:"))]
    assert first == "2023-05-01 10:00:00"
    assert created[int(refs["a2-2-2"].removeprefix("mem:"))] == "2023-06-10 10:01:00"
    # The derived index files are rebuilt from these rows at the next open, not kept stale.
    leftovers = [p.name for p in (tmp_path / "t").iterdir() if p.name.startswith("bench.db.")]
    assert leftovers == []
