"""Helpers shared by the benchmarks: the bandwidth probe and the extra_info recorder."""

from __future__ import annotations

import time

import numpy as np

#: Bytes summed by the bandwidth probe: far larger than the last-level cache (32 MiB here).
PROBE_BYTES = 1 << 30


def measure_bandwidth(nbytes: int = PROBE_BYTES, repeats: int = 5) -> float:
    """Best-of-n GB/s of ``np.sum`` over a float32 array: the machine's read-bandwidth floor."""
    data = np.ones(nbytes // 4, np.float32)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        data.sum()
        best = min(best, time.perf_counter() - start)
    return nbytes / best / 1e9


def record(benchmark, *, nbytes: int, bandwidth: float, **info: object) -> None:
    """Puts GB/s and the ratio to the bandwidth floor into ``extra_info`` (after timing)."""
    benchmark.extra_info.update(info)
    benchmark.extra_info["bytes"] = nbytes
    benchmark.extra_info["bandwidth_gbs"] = round(bandwidth, 2)
    stats = getattr(benchmark, "stats", None)
    if stats is None:  # --benchmark-disable: nothing was timed
        return
    seconds = stats.stats.min
    floor = nbytes / (bandwidth * 1e9)
    benchmark.extra_info["gbs"] = round(nbytes / seconds / 1e9, 2)
    benchmark.extra_info["floor_ms"] = round(floor * 1e3, 3)
    benchmark.extra_info["ratio_to_floor"] = round(seconds / floor, 2)
