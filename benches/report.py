"""Prints the markdown tables of docs/notes/performance-notes.md from a ``--benchmark-json`` file.

python benches/report.py bench.json

The kernel benchmarks (test_scan_bench.py, test_bandwidth_bench.py) make the first table; the
scale benchmarks (test_scale_bench.py, test_scale_write_bench.py,
test_server_memory_bench.py) each make their own, when the file has them.
"""

from __future__ import annotations

import json
import sys
from typing import Any


def table(head: tuple[str, ...], rows: list[tuple[str, ...]]) -> None:
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for row in rows:
        print("| " + " | ".join(row) + " |")
    print()


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3f}" if seconds < 0.1 else f"{seconds * 1e3:.1f}"


def mb(kb: int) -> str:
    return f"{kb / 1024:.1f}"


def kernel_rows(benches: list[dict[str, Any]]) -> list[tuple[str, ...]]:
    rows = []
    for bench in benches:
        info, stats = bench["extra_info"], bench["stats"]
        rows.append(
            (
                bench["group"],
                info.get("backend", "-"),
                str(info.get("path", "-")),
                str(info.get("threads", "-")),
                f"{stats['min'] * 1e3:.3f}",
                f"{stats['median'] * 1e3:.3f}",
                str(info.get("gbs", "-")),
                str(info.get("floor_ms", "-")),
                str(info.get("ratio_to_floor", "-")),
            )
        )
    return sorted(rows)


def main(path: str) -> None:
    with open(path) as f:
        data = json.load(f)
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for bench in data["benchmarks"]:
        name = bench["name"].split("[")[0]
        by_kind.setdefault(name, []).append(bench)

    kernel = [b for n in ("test_bandwidth_probe", "test_index_scan",
                          "test_blob_chunk_scan") for b in by_kind.get(n, [])]  # fmt: skip
    if kernel:
        table(
            ("workload", "backend", "path", "threads", "min ms", "median ms", "GB/s",
             "floor ms", "min / floor"),
            kernel_rows(kernel),
        )  # fmt: skip

    def key(b: dict[str, Any]) -> tuple[int, int, str]:
        i = b["extra_info"]
        return (i.get("rows", 0), i.get("dim", 0), b["name"])

    scans = sorted(by_kind.get("test_scale_scan", []), key=key)
    if scans:
        rows = []
        for b in scans:
            i, s = b["extra_info"], b["stats"]
            index = i["path"].startswith("search.scan (")
            rows.append((
                b["group"].split()[0], f"{i['rows']:,}", str(i["dim"]), f"{i['scanned']:,}",
                i["path"], ms(s["min"]), ms(s["median"]),
                str(i.get("gbs", "-")) if index else "-",
                str(i.get("floor_ms", "-")) if index else "-",
                str(i.get("ratio_to_floor", "-")) if index else "-",
                str(i.get("load1", "-")),
            ))  # fmt: skip
        table(
            ("region", "rows", "dim", "rows scored", "path", "min ms", "median ms", "GB/s",
             "floor ms", "min / floor", "load"),
            rows,
        )  # fmt: skip

    recalls = sorted(
        by_kind.get("test_scale_recall", []) + by_kind.get("test_recall_after_store", []),
        key=key,
    )
    if recalls:
        table(
            ("rows", "dim", "what", "min ms", "median ms", "load"),
            [
                (f"{b['extra_info']['rows']:,}", str(b["extra_info"]["dim"]),
                 b["extra_info"]["path"], ms(b["stats"]["min"]), ms(b["stats"]["median"]),
                 str(b["extra_info"].get("load1", "-")))
                for b in recalls
            ],
        )  # fmt: skip

    stores = sorted(by_kind.get("test_store_latency", []), key=key)
    if stores:
        table(
            ("rows", "dim", "store min ms", "store median ms", "sync min ms", "sync median ms",
             "sync max ms", "load"),
            [
                (f"{b['extra_info']['rows']:,}", str(b["extra_info"]["dim"]),
                 ms(b["stats"]["min"]), ms(b["stats"]["median"]),
                 str(b["extra_info"]["sync_min_ms"]), str(b["extra_info"]["sync_median_ms"]),
                 str(b["extra_info"]["sync_max_ms"]), str(b["extra_info"].get("load1", "-")))
                for b in stores
            ],
        )  # fmt: skip

    rebuilds = sorted(by_kind.get("test_index_rebuild", []), key=key)
    if rebuilds:
        table(
            ("rows", "dim", "index MB", "min s", "median s", "rows / s", "load"),
            [
                (f"{b['extra_info']['rows']:,}", str(b["extra_info"]["dim"]),
                 f"{b['extra_info']['index_bytes'] / 2**20:.1f}", f"{b['stats']['min']:.2f}",
                 f"{b['stats']['median']:.2f}",
                 f"{b['extra_info']['rows'] / b['stats']['min']:,.0f}",
                 str(b["extra_info"].get("load1", "-")))
                for b in rebuilds
            ],
        )  # fmt: skip

    servers = sorted(by_kind.get("test_server_memory", []), key=key)
    if servers:
        rows = []
        for b in servers:
            i = b["extra_info"]
            stages = sorted({k.split("_VmRSS")[0] for k in i if k.endswith("_VmRSS_kb")},
                            key=lambda w: -1 if w == "idle" else 10**9 if w == "after_n"
                            else int(w.split("_")[1]))  # fmt: skip
            for when in stages:
                label = {"after_n": f"after {i['recalls']}", "idle": "idle"}.get(when)
                rows.append((
                    i["backend"], label or when.replace("_", " "),
                    mb(i[f"{when}_VmRSS_kb"]), mb(i[f"{when}_RssAnon_kb"]),
                    mb(i[f"{when}_RssFile_kb"]), mb(i[f"{when}_VmHWM_kb"]),
                    str(i.get(f"{when}_threads", "-")),
                ))  # fmt: skip
        table(
            ("kernel", "when", "VmRSS MB", "RssAnon MB", "RssFile MB", "VmHWM MB", "threads"),
            rows,
        )
        table(
            ("kernel", "rows", "dim", "index files MB", "budget MB", "VmRSS within",
             "RssAnon growth MB", "VmHWM - VmRSS MB", "recall p50 ms", "load"),
            [
                (b["extra_info"]["backend"], f"{b['extra_info']['rows']:,}",
                 str(b["extra_info"]["dim"]), f"{b['extra_info']['index_bytes'] / 2**20:.1f}",
                 mb(b["extra_info"]["budget_kb"]), str(b["extra_info"]["within_budget"]),
                 mb(b["extra_info"]["anon_growth_kb"]), mb(b["extra_info"]["peak_over_rss_kb"]),
                 str(b["extra_info"]["recall_p50_ms"]),
                 str(b["extra_info"].get("load1", "-")))
                for b in servers
            ],
        )  # fmt: skip

    bandwidth = {b["extra_info"].get("bandwidth_gbs") for b in data["benchmarks"]} - {None}
    if bandwidth:
        print(f"Bandwidth floor used: {', '.join(map(str, sorted(bandwidth)))} GB/s")


if __name__ == "__main__":
    main(sys.argv[1])
