"""Benchmark setup: refuse a debug build, pin BLAS threads, and measure memory bandwidth once.

Run: ``pytest benches --benchmark-enable`` (CI runs ``--benchmark-disable`` as a smoke test).
"""

from __future__ import annotations

import os
import time
from types import ModuleType

import numpy as np
import pytest

# numpy reads these when it first loads BLAS; the fallback scores with einsum (no BLAS), but
# pinning keeps any BLAS call in a benchmark single-threaded and comparable.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

from cpersona import _fallback  # noqa: E402


def pytest_configure(config: pytest.Config) -> None:
    try:
        from cpersona import _core
    except ImportError:
        return
    if _core.DEBUG_BUILD:
        raise pytest.UsageError(
            "cpersona._core is a debug build; benchmark a release build "
            "(maturin develop --release, or pip install -e .)"
        )


@pytest.fixture(scope="session", params=["rust", "numpy"])
def backend(request: pytest.FixtureRequest) -> ModuleType:
    if request.param == "numpy":
        return _fallback
    try:
        from cpersona import _core
    except ImportError:
        if os.environ.get("CPERSONA_REQUIRE_RUST") == "1":
            pytest.fail("CPERSONA_REQUIRE_RUST=1 but cpersona._core does not import")
        pytest.skip("cpersona._core is not built")
    return _core


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


@pytest.fixture(scope="session")
def bandwidth_gbs() -> float:
    return measure_bandwidth()


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
