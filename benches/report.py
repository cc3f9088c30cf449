"""Prints the markdown table of docs/performance.md from a ``--benchmark-json`` file.

python benches/report.py bench.json
"""

from __future__ import annotations

import json
import sys


def main(path: str) -> None:
    with open(path) as f:
        data = json.load(f)
    rows = []
    for bench in data["benchmarks"]:
        info = bench["extra_info"]
        stats = bench["stats"]
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
    rows.sort()
    head = (
        "workload",
        "backend",
        "path",
        "threads",
        "min ms",
        "median ms",
        "GB/s",
        "floor ms",
        "min / floor",
    )
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for row in rows:
        print("| " + " | ".join(row) + " |")
    bandwidth = {b["extra_info"].get("bandwidth_gbs") for b in data["benchmarks"]}
    print(f"\nBandwidth floor used: {', '.join(map(str, sorted(bandwidth)))} GB/s")


if __name__ == "__main__":
    main(sys.argv[1])
