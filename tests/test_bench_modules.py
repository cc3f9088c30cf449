"""The benchmarks that run as `python -m benches.X` (not pytest files) still run.

CI never runs them at their real sizes (minutes to hours); a renamed function or a changed
tool answer would otherwise break them unnoticed until someone reran a published number.
Each runs here at a toy size, from the repository root as docs/notes/performance-notes.md
says, and its output is read for the figures the docs quote.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
ROWS = 1500


def _path() -> str:
    """The repository first (the `benches` package), then the run's own PYTHONPATH (the tree
    under test, where an editable install points elsewhere)."""
    return os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)


def _run(args: list[str], env_extra: dict[str, str], timeout: float = 240) -> str:
    env = dict(os.environ, PYTHONPATH=_path(), **env_extra)
    done = subprocess.run(
        [sys.executable, "-m", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, f"{args[0]} failed:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
    return done.stdout


@pytest.fixture(scope="module")
def million_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Path]:
    """One toy run of benches.million: its JSON result and the cache holding its corpus."""
    cache = tmp_path_factory.mktemp("bench-cache")
    out = cache / "million.jsonl"
    _run(
        ["benches.million", "--sizes", str(ROWS), "--rounds", "3", "--stores", "2"],
        {"CPERSONA_BENCH_CACHE": str(cache), "CPERSONA_BENCH_OUT": str(out)},
    )
    return json.loads(out.read_text().splitlines()[-1]), cache


def test_million_reports_every_figure_the_docs_quote(
    million_run: tuple[dict[str, Any], Path],
) -> None:
    size = million_run[0][str(ROWS)]
    for figure in ("recall", "trivial", "store"):
        assert size[figure]["p50"] > 0 and size[figure]["p95"] >= size[figure]["p50"]
    assert size["recall"]["n"] == 3 and size["store"]["n"] == 2
    assert size["store_paired_share"]["n"] == 2
    assert {"server_share_p50", "server_share_p95", "first_recall_ms"} <= size.keys()
    assert size["rss_after_rounds"]["RssAnon_mb"] > 0


def test_checked_scan_times_both_scans(million_run: tuple[dict[str, Any], Path]) -> None:
    corpus = next((million_run[1] / "million").glob(f"natural-{ROWS}x*.db"))
    text = _run(["benches.checked_scan", str(corpus), "4"], {})
    assert f"{ROWS} rows x 384" in text
    assert "checked: median" in text and "unchecked: median" in text and "n=4" in text


def test_store_stages_times_each_stage_of_a_store(
    million_run: tuple[dict[str, Any], Path], tmp_path: Path
) -> None:
    work = str(tmp_path / "work")
    text = _run(
        ["benches.store_stages", "--rows", str(ROWS), "--stores", "3", "--json", "--work", work],
        {"CPERSONA_BENCH_CACHE": str(million_run[1])},
    )
    result = json.loads(text)
    stages = result["stages"]
    assert result["rows"] == ROWS and result["first_store_ms"] > 0
    for name in ("store (handler)", "sqlite transaction", "embedding", "vector sync memories"):
        assert stages[name]["n"] == 3 and stages[name]["p95"] >= stages[name]["p50"] > 0
    assert stages["  sync: append"]["n"] == 3  # one new slot per store
    assert stages["full-text refresh memories"]["n"] == 3


def test_checked_scan_refuses_a_missing_corpus(tmp_path: Path) -> None:
    missing = tmp_path / "nothing.db"
    done = subprocess.run(
        [sys.executable, "-m", "benches.checked_scan", str(missing)],
        cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=_path()),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert "is not a corpus with a built vector index" in done.stderr
    assert not missing.exists()  # no empty database left under the mistyped name


def test_pg_statements_counts_both_backends(pg_url: str) -> None:
    text = _run(["benches.pg_statements", "--url", pg_url, "--rows", "20"], {})
    # "<backend> <tool>: N statements, M round trips", each followed by its statements
    counts = {}
    for line in text.splitlines():
        found = re.fullmatch(r"(\w+ \w+): (\d+) statements, (\d+) round trips", line)
        if found:
            counts[found[1]] = (int(found[2]), int(found[3]))
    assert set(counts) == {
        "sqlite store",
        "sqlite recall",
        "postgresql store",
        "postgresql recall",
    }, text
    assert all(0 < trips <= n for n, trips in counts.values()), counts
    # pipelining is PostgreSQL's: there a recall sends fewer round trips than statements
    assert counts["postgresql recall"][1] < counts["postgresql recall"][0], text


def test_pg_probe_counts_the_runs_transactions_and_what_backends_waited_on(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """benches/throughput.py says what saturated from these figures (docs/scale-out.md)."""
    import threading

    import psycopg

    from benches import pg_probe

    monkeypatch.setattr(pg_probe, "FLUSH_WAIT", 0.2)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE probe_t (x int)")

    def sleep() -> None:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute("SELECT pg_sleep(0.5)")

    sleeper = threading.Thread(target=sleep)
    with pg_probe.PgProbe(pg_url).run() as figures:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            for i in range(25):
                conn.execute("INSERT INTO probe_t VALUES (%s)", [i])
            # The counters are a backend's once it flushes its statistics (at most once a
            # second): make this one's go out with its next statement.
            conn.execute("SELECT pg_stat_force_next_flush()")
            conn.execute("SELECT 1")
        sleeper.start()
        sleeper.join()
    assert figures.commits >= 25
    assert figures.waits["Timeout:PgSleep"] > 0, figures.waits
    assert "Timeout:PgSleep" in figures.summary(1.0, 25)


def test_pg_million_compares_both_backends_on_one_corpus(
    million_run: tuple[dict[str, Any], Path], pg_url: str, tmp_path: Path
) -> None:
    """The toy corpus of `million_run`, migrated into a fresh PostgreSQL database as
    docs/notes/performance-notes.md says, then benches.pg_million against it and the SQLite copy."""
    _, cache = million_run
    corpus = next(cache.rglob(f"natural-{ROWS}x*.db"))
    _run(["cpersona", "migrate", "--from", str(corpus), "--to", pg_url], {})
    text = _run(
        ["benches.pg_million", "--url", pg_url, "--rows", str(ROWS), "--rounds", "3",
         "--stores", "2", "--work", str(tmp_path / "work")],
        {"CPERSONA_BENCH_CACHE": str(cache)},
    )  # fmt: skip
    result = json.loads(text[text.index("\n{") + 1 :])
    for backend in ("sqlite", "postgresql"):
        figures = result[backend]
        assert figures["recall"]["n"] == 3 and figures["store"]["n"] == 2, figures
        assert figures["recall"]["p95"] >= figures["recall"]["p50"] > 0
    assert result["ratio"]["recall_p50"] > 0


def test_pg_recall_stages_times_each_backends_stages_and_statements(
    pg_url: str, tmp_path: Path
) -> None:
    text = _run(
        ["benches.pg_recall_stages", "--pg-url", pg_url, "--rows", "200", "--rounds", "2",
         "--per-round", "3"],
        {"CPERSONA_BENCH_CACHE": str(tmp_path / "cache")},
    )  # fmt: skip
    for backend in ("sqlite", "postgresql"):
        found = re.search(
            rf"^{backend}: client wall p50 ([\d.]+) ms, server call p50 ([\d.]+)", text, re.M
        )
        assert found, text
        assert float(found[1]) >= float(found[2]) > 0, found[0]
    assert re.search(r"^  vector_scan +[\d.]+ ms$", text, re.M), text
    # the snapshot's BEGIN and its reads, one pipeline, timed while recalls ran
    assert re.search(r"^  BEGIN \+ \d reads +[\d.]+ +[\d.]+$", text, re.M), text
    assert re.search(r"^SELECT 1: back to back [\d.]+ ms, after 3 ms idle [\d.]+ ms$", text, re.M)


def test_plots_draws_every_image_of_the_performance_page(tmp_path: Path) -> None:
    """benches.plots over the committed results: every image docs/performance.md shows."""
    pytest.importorskip("matplotlib")
    _run(["benches.plots", "--out", str(tmp_path)], {})
    page = (ROOT / "docs" / "performance.md").read_text()
    shown = set(re.findall(r"\]\(plots/([\w.-]+\.png)\)", page))
    assert shown, "docs/performance.md shows no plot"
    drawn = {p.name for p in tmp_path.glob("*.png")}
    assert shown <= drawn
    assert all((tmp_path / name).stat().st_size > 10_000 for name in shown)  # not blank


def test_stale_facts_reports_both_stores_and_the_steps_cost(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    cache = tmp_path_factory.mktemp("stale-cache")
    out = _run(
        [
            "benches.stale_facts",
            "--facts",
            "12",
            "--cost-rows",
            str(ROWS),
            "--rounds",
            "3",
            "--json",
        ],
        {"CPERSONA_BENCH_CACHE": str(cache)},
    )
    result = json.loads(out.strip().splitlines()[-1])
    quality = result["quality"]
    for store in ("declared", "undeclared"):
        shares = quality[store]
        assert sum(shares[k] for k in ("current_first", "stale_first", "other_first")) == 1.0
    assert quality["declared"]["stale_first"] == 0.0
    cost = result["cost"]
    assert cost["declared_relations"] == ROWS // 4
    for condition in ("none", "declared", "declared_include"):
        assert cost["step_ms"][condition]["n"] == 3 and cost["recall_ms"][condition]["p50"] > 0


def test_recall_ab_times_both_checkouts_in_turns(tmp_path: Path) -> None:
    python = str(ROOT / "python")
    text = _run(
        ["benches.recall_ab", "--before", python, "--after", python, "--rows", "300",
         "--turns", "2", "--batch", "3"],
        {"CPERSONA_BENCH_CACHE": str(tmp_path / "cache")},
    )  # fmt: skip
    out = json.loads(text.strip().splitlines()[-1])
    assert out["recalls_per_side"] == 6
    for side in ("before", "after"):
        assert 0 < out[side]["p10"] <= out[side]["p50"] <= out[side]["p90"], out
    assert out["ratio_after_before"]["min"] <= out["ratio_after_before"]["median"], out
