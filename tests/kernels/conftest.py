"""Fixtures for the kernel tests: the `backend` fixture runs each test on Rust and on numpy."""

from __future__ import annotations

import os
from types import ModuleType

import pytest
from cpersona import _fallback
from hypothesis import HealthCheck, settings
from hypothesis.errors import InvalidArgument

# The suite-wide conftest may already define these; define them only when running alone.
for _name, _examples in (("dev", 50), ("ci", 30)):
    try:
        settings.get_profile(_name)
    except InvalidArgument:
        settings.register_profile(
            _name,
            max_examples=_examples,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow],
        )
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def load_rust() -> ModuleType:
    """The extension, or skip (fail with CPERSONA_REQUIRE_RUST=1) when it is not built."""
    try:
        from cpersona import _core
    except ImportError as exc:
        if os.environ.get("CPERSONA_REQUIRE_RUST") == "1":
            pytest.fail(f"CPERSONA_REQUIRE_RUST=1 but cpersona._core does not import: {exc}")
        pytest.skip("cpersona._core is not built")
    return _core


# Session-scoped: backends hold no state, and Hypothesis refuses function-scoped fixtures.
@pytest.fixture(scope="session", params=["rust", "numpy"])
def backend(request: pytest.FixtureRequest) -> ModuleType:
    return load_rust() if request.param == "rust" else _fallback


@pytest.fixture(scope="session")
def rust() -> ModuleType:
    return load_rust()


@pytest.fixture(scope="session")
def numpy_backend() -> ModuleType:
    return _fallback
