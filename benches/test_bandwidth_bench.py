"""The memory-bandwidth probe the scan benchmarks are compared against."""

from __future__ import annotations

import numpy as np
from bench_support import PROBE_BYTES, record


def test_bandwidth_probe(benchmark, bandwidth_gbs: float) -> None:
    benchmark.group = f"bandwidth n={PROBE_BYTES >> 20}MiB"
    data = np.ones(PROBE_BYTES // 4, np.float32)
    benchmark.pedantic(data.sum, rounds=5, iterations=1, warmup_rounds=1)
    record(benchmark, nbytes=PROBE_BYTES, bandwidth=bandwidth_gbs, op="np.sum float32")
