"""Corpora and queries of the full-text benchmarks (test_fts_bench.py, test_fts_mcp_bench.py).

Memories of one agent (plus 5% of another), each a sentence of 8-20 common English words drawn
with Zipf weights; queries are bags of 6-8 of those words. Cached under
`$CPERSONA_BENCH_CACHE/fts` (default ~/.cache/cpersona-bench/fts) for full runs.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest
from cpersona.storage import open_database

COMMON = (  # noqa: SIM905 (a word list reads best as text)
    "the be to of and a in that have it for not on with he as you do at this but his by "
    "from they we say her she or an will my one all would there their what so up out if "
    "about who get which go me when make can like time no just him know take people into "
    "year your good some could them see other than then now look only come its over "
    "think also back after use two how our work first well way even new want because any "
    "these give day most us maybe promotion said decided load hiring meeting project "
    "deadline family weekend dinner trip called friend team manager budget review plan "
    "happy tired morning evening yesterday tomorrow week month office home school doctor "
    "birthday present garden kitchen coffee "
).split()
SIZES = (10_000, 100_000, 237_654)
QUERIES = 60


def sizes(config: pytest.Config) -> tuple[int, ...]:
    if not config.getoption("benchmark_enable", False):
        return (2_000,)
    env = os.environ.get("CPERSONA_BENCH_FTS_ROWS")
    return tuple(int(x) for x in env.split(",")) if env else SIZES


def parametrize_rows(metafunc: pytest.Metafunc) -> None:
    if "rows" in metafunc.fixturenames:
        chosen = sizes(metafunc.config)
        metafunc.parametrize("rows", chosen, ids=[str(n) for n in chosen], scope="module")


def weights() -> list[float]:
    return [1.0 / (rank + 1) for rank in range(len(COMMON))]


def build(path: Path, rows: int) -> None:
    rng = random.Random(rows)
    w = weights()
    db = open_database(str(path))
    try:
        with db.atomic() as conn:
            conn.executemany(
                "INSERT INTO memories(agent_id, content, timestamp, created_at) "
                "VALUES (?, ?, '', datetime('2025-01-01', ?))",
                (
                    (
                        "bench" if i % 20 else "other",
                        f"note {i}: " + " ".join(rng.choices(COMMON, w, k=rng.randint(8, 20))),
                        f"+{i} seconds",
                    )
                    for i in range(rows)
                ),
            )
    finally:
        db.close()


def corpus_path(rows: int, request: pytest.FixtureRequest, tmp_path_factory) -> Path:
    """The corpus of `rows` rows: cached for a full run, else built in a temporary directory."""
    if request.config.getoption("benchmark_enable", False):
        cache = os.environ.get("CPERSONA_BENCH_CACHE")
        base = (Path(cache) if cache else Path.home() / ".cache" / "cpersona-bench") / "fts"
    else:
        base = tmp_path_factory.mktemp("fts")
    base.mkdir(parents=True, exist_ok=True)
    path = base / f"fts-{rows}-v1.db"
    if not path.exists():
        tmp = path.with_suffix(".building")
        tmp.unlink(missing_ok=True)
        build(tmp, rows)
        tmp.rename(path)
    return path


def queries() -> list[str]:
    rng = random.Random(7)
    return [" ".join(rng.sample(COMMON[40:], rng.randint(6, 8))) for _ in range(QUERIES)]
