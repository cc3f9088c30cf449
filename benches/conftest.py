"""Benchmark setup: refuse a debug build, pin BLAS threads, and measure memory bandwidth once.

Run: ``pytest benches --benchmark-enable`` (CI runs ``--benchmark-disable`` as a smoke test).
"""

from __future__ import annotations

import os
from types import ModuleType

import pytest

# numpy reads these when it first loads BLAS; the fallback scores with einsum (no BLAS), but
# pinning keeps any BLAS call in a benchmark single-threaded and comparable.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

from bench_support import measure_bandwidth  # noqa: E402
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


@pytest.fixture(scope="session")
def bandwidth_gbs() -> float:
    return measure_bandwidth()
