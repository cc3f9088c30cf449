"""Benchmark setup: refuse a debug build, pin BLAS threads, and measure memory bandwidth once.

Run: ``pytest benches --benchmark-enable`` (CI runs ``--benchmark-disable`` as a smoke test).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from types import ModuleType

import pytest

# numpy reads these when it first loads BLAS; the fallback scores with einsum (no BLAS), but
# pinning keeps any BLAS call in a benchmark single-threaded and comparable.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

# The benchmarks share the tests' support package (tests/support/).
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from bench_support import measure_bandwidth  # noqa: E402
from support import backends  # noqa: E402


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    # One process: pyproject's addopts run the tests on every core (pytest-xdist), and a
    # benchmark beside another worker measures the other worker too (pytest-benchmark would
    # disable itself, with a warning the suite's filterwarnings makes an error). Before
    # xdist's and pytest-benchmark's own pytest_configure, which read these options.
    if hasattr(config.option, "numprocesses"):
        config.option.numprocesses = 0
        config.option.dist = "no"
        config.option.tx = []
    try:
        from cpersona import _core
    except ImportError:
        return
    if _core.DEBUG_BUILD:
        raise pytest.UsageError(
            "cpersona._core is a debug build; benchmark a release build "
            "(maturin develop --release, or pip install -e .)"
        )


@pytest.fixture(scope="session", params=backends.KERNELS)
def kernels(request: pytest.FixtureRequest) -> ModuleType:
    """The kernels module of each backend (tests/support/backends.py)."""
    return backends.load_kernels(str(request.param))


@pytest.fixture(scope="session")
def bandwidth_gbs() -> float:
    return measure_bandwidth()
