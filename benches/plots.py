"""The plots of docs/performance.md, drawn from the benches' JSON (issue 33 item 5).

``python -m benches.plots [--results benches/results] [--out docs/plots]``

Inputs, all under ``benches/results/``:

- ``published.json``: figures measured before the benches wrote JSON, transcribed from the
  lab notes (docs/notes/performance-notes.md; each entry names its section and command);
- ``first_minutes-<rows>.json``: ``python -m benches.first_minutes --rows <rows> --json ...``
  (cpersona and CPersona 2.5.12 on one 2.5.12 store, the same queries, one run).

Writes PNG images to ``docs/plots/``. Needs matplotlib (a bench-only dependency:
``pip install matplotlib``).
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # after the backend is chosen
from matplotlib.ticker import FuncFormatter, LogLocator

PLAIN = FuncFormatter(lambda value, _: f"{value:g}")

ROOT = Path(__file__).resolve().parents[1]
COLORS = {"sqlite": "tab:blue", "postgresql": "tab:green", "2.5.12": "tab:red"}
LABELS = {"sqlite": "cpersona, SQLite", "postgresql": "cpersona, PostgreSQL"}


def _first_minutes(results: Path) -> dict[int, dict[str, Any]]:
    runs = {}
    for path in sorted(results.glob("first_minutes-*.json")):
        got = json.loads(path.read_text())
        runs[int(got["rows"])] = got
    return runs


def _built_at(run: dict[str, Any]) -> float | None:
    """Seconds from cpersona's spawn to both memories index files built, None when the run
    ended first (the rebuild then stops with the server)."""
    done = run["cpersona"].get("build_done_at_s", {})
    times = [t for name, t in done.items() if name.endswith((".memories.vec", ".memories.fts"))]
    return max(times) if len(times) == 2 else None


def _steady(run: dict[str, Any], server: str) -> list[float]:
    """A server's recall times after cpersona's build was done (2.5.12 builds nothing: all
    but its first); none for cpersona when its build did not end within the run."""
    if server != "cpersona":
        return [ms for _, ms in run[server]["calls"][1:]]
    built = _built_at(run)
    return [] if built is None else [ms for t, ms in run[server]["calls"] if t >= built]


def _log_y(ax: Any) -> None:
    """A log y axis labelled 1, 2, 5, 10, 20, 50... in plain numbers."""
    ax.set_yscale("log")
    ax.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(PLAIN)
    ax.yaxis.set_minor_formatter(FuncFormatter(lambda *_: ""))


def _size_axis(ax: Any) -> None:
    ax.set_xscale("log")
    _log_y(ax)
    ax.set_xticks([10_000, 100_000, 1_000_000], ["10k", "100k", "1M"])
    ax.set_xlabel("memories in the store")
    ax.grid(True, which="both", alpha=0.3)


def recall_plot(published: dict[str, Any], runs: dict[int, dict[str, Any]], out: Path) -> None:
    fig, ax = plt.subplots(figsize=(10, 4.5))
    for backend in ("sqlite", "postgresql"):
        rows = sorted((r for r in published["recall"] if r["backend"] == backend),
                      key=lambda r: r["rows"])  # fmt: skip
        xs = [r["rows"] for r in rows]
        ax.plot(xs, [r["p50"] for r in rows], "o-", color=COLORS[backend],
                label=f"{LABELS[backend]} p50")  # fmt: skip
        ax.plot(xs, [r["p95"] for r in rows], "o:", color=COLORS[backend], alpha=0.6,
                label=f"{LABELS[backend]} p95")  # fmt: skip
    if runs:
        sizes = sorted(runs)
        for server, marker in (("2.5.12", "s"), ("cpersona", "D")):
            steady = {n: _steady(runs[n], server) for n in sizes}
            shown = [n for n in sizes if steady[n]]
            p50 = [statistics.median(steady[n]) for n in shown]
            loads = "/".join(f"{runs[n]['load'][0]:.0f}" for n in shown)
            label = ("CPersona 2.5.12" if server == "2.5.12" else "cpersona, SQLite") + (
                f" p50, one run beside\nthe other (first_minutes, load {loads})"
            )
            color = COLORS["2.5.12" if server == "2.5.12" else "sqlite"]
            ax.plot(shown, p50, marker + "--", color=color, label=label, markerfacecolor="none")
    _size_axis(ax)
    ax.set_ylabel("recall through MCP, ms")
    ax.set_title("Recall latency against store size")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0))
    fig.tight_layout()
    fig.savefig(out / "recall.png", dpi=110)
    plt.close(fig)


def store_plot(published: dict[str, Any], out: Path) -> None:
    fig, ax = plt.subplots(figsize=(7, 4))
    for backend in ("sqlite", "postgresql"):
        rows = sorted((r for r in published["store"] if r["backend"] == backend),
                      key=lambda r: r["rows"])  # fmt: skip
        xs = [r["rows"] for r in rows]
        ax.plot(xs, [r["p50"] for r in rows], "o-", color=COLORS[backend],
                label=f"{LABELS[backend]} p50")  # fmt: skip
        ax.plot(xs, [r["p95"] for r in rows], "o:", color=COLORS[backend], alpha=0.6,
                label=f"{LABELS[backend]} p95")  # fmt: skip
    _size_axis(ax)
    ax.set_ylim(2, 40)
    ax.set_ylabel("store through MCP, ms")
    ax.set_title("Store latency against store size")
    ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    fig.savefig(out / "store.png", dpi=110)
    plt.close(fig)


def memory_plot(published: dict[str, Any], out: Path) -> None:
    entries = published["memory"]
    labels = []
    for e in entries:
        n = {10_000: "10k", 100_000: "100k", 1_000_000: "1M"}[e["rows"]]
        labels.append(
            f"{n}\n{e.get('processes', 'one server')}".replace("each later", "each\nlater")
        )
    anon = [e["anon"] for e in entries]
    shared = [e["rss"] - e["anon"] for e in entries]
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.bar(labels, anon, color="tab:blue", label="the process's own (anonymous)")
    ax.bar(labels, shared, bottom=anon, color="tab:gray", alpha=0.5,
           label="mapped index files (page cache, shared between processes)")  # fmt: skip
    for i, e in enumerate(entries):
        ax.text(i, e["rss"] + 10, f"{e['rss']} MB", ha="center", fontsize=8)
    ax.set_ylim(0, 900)
    ax.set_ylabel("resident memory per server process, MB")
    ax.set_title("Memory per process")
    ax.tick_params(axis="x", labelsize=7)
    ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    fig.savefig(out / "memory.png", dpi=110)
    plt.close(fig)


def startup_plot(published: dict[str, Any], out: Path) -> None:
    entries = published["startup"]
    fig, ax = plt.subplots(figsize=(7, 3))
    names = [e["what"] for e in entries]
    values = [e["p50"] for e in entries]
    colors = [COLORS["2.5.12"] if "2.5.12" in n else
              ("tab:blue" if n.startswith("cpersona") else "tab:gray") for n in names]  # fmt: skip
    ax.barh(names, values, color=colors)
    for i, v in enumerate(values):
        ax.text(v + 15, i, f"{v} ms", va="center", fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("spawn to the tools/list answer, ms (p50)")
    ax.set_title("Start-up")
    ax.tick_params(axis="y", labelsize=8)
    ax.set_xlim(0, max(values) * 1.2)
    fig.tight_layout()
    fig.savefig(out / "startup.png", dpi=110)
    plt.close(fig)


def first_minutes_plot(run: dict[str, Any], out: Path) -> None:
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for server in ("2.5.12", "cpersona"):
        calls = run[server]["calls"]
        label = "CPersona 2.5.12" if server == "2.5.12" else "cpersona"
        ax.plot([t for t, _ in calls], [ms for _, ms in calls], ".", markersize=3,
                color=COLORS["2.5.12" if server == "2.5.12" else "sqlite"],
                label=f"{label}: each recall")  # fmt: skip
    at = _built_at(run)
    if at is not None:
        ax.axvline(at, color="black", linestyle="--", linewidth=1)
        ax.text(at, 0.02, f" index files built ({at:.0f} s)", fontsize=8,
                transform=ax.get_xaxis_transform())  # fmt: skip
    else:
        ax.text(0.01, 0.02, "cpersona's index files were not all built within the run",
                fontsize=8, transform=ax.transAxes)  # fmt: skip
    _log_y(ax)
    ax.set_xlabel("seconds since the server was spawned (back-to-back recalls)")
    ax.set_ylabel("recall through MCP, ms")
    ax.set_title(f"The first minutes on a {run['rows']:,}-memory store written by 2.5.12")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="upper right")
    fig.tight_layout()
    fig.savefig(out / f"first-minutes-{run['rows']}.png", dpi=110)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--results", type=Path, default=ROOT / "benches" / "results")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "plots")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    published = json.loads((args.results / "published.json").read_text())
    runs = _first_minutes(args.results)
    recall_plot(published, runs, args.out)
    store_plot(published, args.out)
    memory_plot(published, args.out)
    startup_plot(published, args.out)
    for run in runs.values():
        first_minutes_plot(run, args.out)
    print(f"wrote {sorted(p.name for p in args.out.glob('*.png'))} to {args.out}")


if __name__ == "__main__":
    main()
