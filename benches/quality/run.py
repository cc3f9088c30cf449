"""Retrieval quality of cpersona on LoCoMo (English) and JSQuAD (Japanese): the tables of
docs/quality.md.

    python -m benches.quality            # the full run (vectors cached: minutes once warm)
    python -m benches.quality --quick    # 1 conversation; 200 JSQuAD questions, 1/3 of articles
    python -m benches.quality --quick --check docs/quality.md   # fail on a >0.03 drop

Each configuration loads the corpus through `store` and asks every question through `recall`
(see harness.py). Vectors come from a disk cache (vectors.py), so only the first run of a model
pays for embedding.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # `python benches/quality/run.py`
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benches.quality import datasets
from benches.quality.harness import REPLAYS, RunResult, load, matrix, note, run
from benches.quality.metrics import Tally, merge, separation
from benches.quality.vectors import DiskCachedProvider

EMBEDDERS = ("local-minilm", "local-e5")
LOCOMO_GROUPS = ("single-hop", "multi-hop", "temporal", "inference")
METRICS = ("R@1", "R@5", "R@10", "nDCG@10", "MRR@10")
#: A quality figure may fall this far below its recorded value before --check fails.
TOLERANCE = 0.03
_BASELINE = re.compile(r"<!-- quick-baseline\n(.*?)\n-->", re.S)


def real_provider(name: str) -> Any:
    if name == "local-minilm":
        from cpersona.embedding.minilm import MiniLMProvider

        return MiniLMProvider(threads=1)
    from cpersona.embedding.e5 import E5Provider

    return E5Provider(threads=1)


def summarise(results: dict[str, dict[str, RunResult]]) -> dict[str, dict[str, Any]]:
    """{config label: {"locomo": {...}, "locomo/<category>": {...}, "jsquad": {...}, ...}}."""
    out: dict[str, dict[str, Any]] = {}
    for label, per_corpus in results.items():
        row: dict[str, Any] = {}
        lo = per_corpus.get("locomo")
        if lo is not None:
            judged = [t for g, t in lo.groups.items() if g not in datasets.PROBES]
            row["locomo"] = merge(judged).row()
            for group in LOCOMO_GROUPS:
                if group in lo.groups:
                    row[f"locomo/{group}"] = lo.groups[group].row()
            row["locomo/adversarial"] = lo.groups.get("adversarial", Tally()).row()
            row["locomo/separation"] = {
                kind: separation(merge(judged), lo.groups[kind])
                for kind in datasets.PROBES
                if kind in lo.groups
            }
        js = per_corpus.get("jsquad")
        if js is not None:
            row["jsquad"] = js.groups["jsquad"].row()
        if "locomo" in row and "jsquad" in row:
            row["mean nDCG@10"] = (row["locomo"]["nDCG@10"] + row["jsquad"]["nDCG@10"]) / 2
        row["seconds"] = sum(r.seconds for r in per_corpus.values())
        out[label] = row
    return out


def latency(names: list[str], corpora: list[datasets.Corpus], samples: int = 40) -> dict[str, Any]:
    """Single-text embed latency (ms) of each model, as `store` and `recall` pay it."""
    passages = [d.content for c in corpora for d in c.docs[:: max(1, len(c.docs) // samples)]]
    queries = [q.text for c in corpora for q in c.queries[:: max(1, len(c.queries) // samples)]]
    out: dict[str, Any] = {}
    for name in names:
        provider = real_provider(name)
        started = time.perf_counter()
        provider.embed(["warm up"], kind="query")
        load_ms = (time.perf_counter() - started) * 1000
        timings: dict[str, float] = {"load_ms": load_ms}
        for kind, texts in (("passage", passages), ("query", queries)):
            spent = []
            for text in texts:
                t0 = time.perf_counter()
                provider.embed([text], kind=kind)  # type: ignore[arg-type]
                spent.append((time.perf_counter() - t0) * 1000)
            timings[f"{kind}_ms_median"] = statistics.median(spent)
            timings[f"{kind}_ms_p90"] = statistics.quantiles(spent, n=10)[-1]
        provider.close()
        out[name] = timings
    return out


def _f(x: Any) -> str:
    return f"{x:.3f}" if isinstance(x, float) else str(x)


def tables(summary: dict[str, dict[str, Any]], lat: dict[str, Any]) -> str:
    lines = ["### Overall", ""]
    lines.append(
        "| configuration | LoCoMo R@1 | R@5 | R@10 | nDCG@10 | MRR@10 | cat-5 rows | "
        "JSQuAD R@1 | R@5 | R@10 | nDCG@10 | MRR@10 | mean nDCG@10 |"
    )
    lines.append("|---" * 13 + "|")
    for label, row in summary.items():
        lo, js = row.get("locomo", {}), row.get("jsquad", {})
        adv = row.get("locomo/adversarial", {})
        cells = [label, *(_f(lo.get(m, "")) for m in METRICS), f"{adv.get('rows', 0):.1f}"]
        cells += [*(_f(js.get(m, "")) for m in METRICS), _f(row.get("mean nDCG@10", ""))]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "### LoCoMo by category (R@10 / nDCG@10; n questions)", ""]
    any_row = next(iter(summary.values()))
    heads = [g for g in LOCOMO_GROUPS if f"locomo/{g}" in any_row]
    lines.append(
        "| configuration | "
        + " | ".join(f"{g} (n={any_row[f'locomo/{g}']['n']})" for g in heads)
        + " | cat-5 empty answers |"
    )
    lines.append("|---" * (len(heads) + 2) + "|")
    for label, row in summary.items():
        cells = [
            f"{row[f'locomo/{g}']['R@10']:.3f} / {row[f'locomo/{g}']['nDCG@10']:.3f}" for g in heads
        ]
        adv = row.get("locomo/adversarial", {})
        lines.append(f"| {label} | " + " | ".join(cells) + f" | {adv.get('empty', 0):.0%} |")
    seps = {k: r["locomo/separation"] for k, r in summary.items() if r.get("locomo/separation")}
    if seps:
        lines += ["", "### Telling a question memory cannot answer, by the best cosine", ""]
        lines.append(
            "| configuration | probes | AUC | threshold at <= 1 point of R@10 | probes emptied |"
        )
        lines.append("|---|---|---|---|---|")
        for label, per_kind in seps.items():
            for kind, sep in per_kind.items():
                lines.append(
                    f"| {label} | {kind} | {sep['auc']:.3f} | {sep['threshold']:.3f} | "
                    f"{sep['probes_emptied']:.0%} |"
                )
    if lat:
        lines += ["", "### Single-text embedding latency (ms, one thread)", ""]
        lines.append(
            "| model | store (passage) median | p90 | recall (query) median | p90 | first load |"
        )
        lines.append("|---|---|---|---|---|---|")
        for name, t in lat.items():
            lines.append(
                f"| {name} | {t['passage_ms_median']:.1f} | {t['passage_ms_p90']:.1f} | "
                f"{t['query_ms_median']:.1f} | {t['query_ms_p90']:.1f} | {t['load_ms']:.0f} |"
            )
    return "\n".join(lines)


def baseline_figures(summary: dict[str, dict[str, Any]]) -> dict[str, float]:
    """The figures --check guards: per configuration, the main metrics of each corpus.

    Confidence configurations are left out: their time decay counts from now, so their
    figures drift as the corpus ages even when nothing changed.
    """
    out = {}
    for label, row in summary.items():
        if "+conf" in label:
            continue
        for corpus in ("locomo", "jsquad"):
            for metric in ("R@1", "R@10", "nDCG@10"):
                if corpus in row:
                    out[f"{label} | {corpus} {metric}"] = round(row[corpus][metric], 4)
    return out


def check(summary: dict[str, dict[str, Any]], doc: Path) -> list[str]:
    """Figures that fell more than TOLERANCE below the quick baseline recorded in `doc`."""
    found = _BASELINE.search(doc.read_text("utf-8"))
    if found is None:
        return [f"{doc} holds no quick-baseline block"]
    recorded: dict[str, float] = json.loads(found.group(1))
    now = baseline_figures(summary)
    return [
        f"{key}: {now[key]:.4f} < recorded {value:.4f} - {TOLERANCE}"
        for key, value in recorded.items()
        if key in now and now[key] < value - TOLERANCE
    ]


def _replays(args: argparse.Namespace) -> list[str]:
    replays = [r for r in args.replays.split(",") if r]
    if args.episodes and "end" not in replays:
        replays.append("end")
    if args.lived and "lived" not in replays:
        replays.append("lived")
    unknown = [r for r in replays if r not in REPLAYS]
    if unknown:
        raise SystemExit(f"unknown replay {unknown[0]!r}: choose among {', '.join(REPLAYS)}")
    return replays


def _label(config_label: str, replay: str) -> str:
    return config_label if replay == "turns" else f"{config_label} @{replay}"


async def main_async(args: argparse.Namespace) -> int:
    quick = args.quick
    replays = _replays(args)
    corpora = [
        datasets.locomo(conversations=1 if quick else None),
        # A third of the articles: a cold quick run (no cached vectors) stays within minutes.
        datasets.jsquad(questions=200, article_step=3) if quick else datasets.jsquad(),
    ]
    corpora = [c for c in corpora if c.name in args.corpora]
    embedders = [e for e in args.embedders.split(",") if e]
    configs = [c for c in matrix(embedders) if not args.only or re.search(args.only, c.label)]
    results: dict[str, dict[str, RunResult]] = {
        _label(c.label, r): {} for r in replays for c in configs
    }
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="cpersona-quality-") as tmp:
        root = Path(tmp)
        for name in ["none", *embedders]:
            todo = [c for c in configs if c.embedder == name]
            if not todo:
                continue
            provider = None if name == "none" else DiskCachedProvider(real_provider(name))
            for corpus in corpora:
                if provider is not None:
                    provider.prime([d.content for d in corpus.docs], "passage", label=corpus.name)
                    provider.prime([q.text for q in corpus.queries], "query", label=corpus.name)
                    if any(r != "turns" for r in replays):
                        summaries = [e.summary for e in corpus.episodes]
                        provider.prime(summaries, "passage", label=f"{corpus.name} episodes")
                for replay in replays:
                    template = root / f"{corpus.name}-{name}-{replay}"
                    t0 = time.monotonic()
                    refs = await load(corpus, todo[0], provider, template, replay=replay)
                    note(
                        f"loaded {corpus.name} with {name} ({replay}): {len(refs)} memories "
                        f"({time.monotonic() - t0:.0f}s)"
                    )
                    for config in todo:
                        result = await run(
                            corpus,
                            config,
                            provider,
                            template,
                            refs,
                            root / "run",
                            calibrate=args.calibrate,
                        )
                        label = _label(config.label, replay)
                        results[label][corpus.name] = result
                        note(f"  {label:34} {corpus.name}: {result.seconds:.0f}s")
            if provider is not None:
                provider.save()
    summary = summarise(results)
    lat = latency(embedders, corpora) if args.latency and embedders else {}
    header = (
        f"{'quick' if quick else 'full'} run, {time.monotonic() - started:.0f}s; "
        f"{platform.processor() or platform.machine()}, Python {platform.python_version()}"
        + f"; replays: {', '.join(replays)}"
        + ("; agents calibrated" if args.calibrate else "")
    )
    text = f"{header}\n\n{tables(summary, lat)}\n"
    print(text)
    if args.json:
        payload = {
            "header": header,
            "summary": summary,
            "latency": lat,
            "baseline": baseline_figures(summary),
        }
        Path(args.json).write_text(json.dumps(payload, indent=1, ensure_ascii=False) + "\n")
    if args.check:
        drops = check(summary, Path(args.check))
        for line in drops:
            print(f"QUALITY DROP {line}", file=sys.stderr)
        return 1 if drops else 0
    return 0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benches.quality",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--quick", action="store_true", help="one LoCoMo conversation and 200 JSQuAD questions"
    )
    parser.add_argument(
        "--embedders",
        default=",".join(EMBEDDERS),
        help="comma-separated local models to compare (default: both)",
    )
    parser.add_argument("--only", default="", help="regex on configuration labels")
    parser.add_argument("--corpora", default="locomo,jsquad")
    parser.add_argument(
        "--replays",
        default="turns",
        help="how each corpus is written, comma-separated: turns (memories only), end (every "
        "session archived as an episode after all memories), lived (each session stored on "
        "its own date and archived when it ends, each row dated as the server's clock would have)",
    )
    parser.add_argument("--episodes", action="store_true", help="same as adding 'end'")
    parser.add_argument("--lived", action="store_true", help="same as adding 'lived'")
    parser.add_argument(
        "--calibrate",
        action="store_true",
        help="calibrate each agent (calibrate_threshold) before its questions",
    )
    parser.add_argument(
        "--no-latency",
        dest="latency",
        action="store_false",
        help="skip the embedding latency measurement",
    )
    parser.add_argument("--json", help="write every figure to this file")
    parser.add_argument("--check", help="compare with the quick baseline recorded in this file")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    return asyncio.run(main_async(parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
