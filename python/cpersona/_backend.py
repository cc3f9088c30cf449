"""The kernel backends by name: `rust` (the extension, `cpersona._core`) or `numpy` (its twin,
`cpersona._fallback`); `auto` is the extension when built, else the numpy twin.

Nothing is chosen at import: an engine loads the kernels its settings name (`Settings.kernel`,
CPERSONA_KERNEL) when it builds its searchers, so two engines of one process may run on
different kernels (the tests run each recall test on both). With `CPERSONA_REQUIRE_RUST=1`
a missing extension is an error rather than a silent fallback under `auto` (CI sets it).
"""

from __future__ import annotations

import os
from types import ModuleType

#: The names `load` accepts (`Settings.kernel` accepts the same).
NAMES = ("auto", "rust", "numpy")


def load(name: str = "auto") -> ModuleType:
    """The kernels module `name` selects.

    Raises:
        ValueError: an unknown name.
        ImportError: `rust` without the extension (or `auto` with CPERSONA_REQUIRE_RUST=1).
    """
    wanted = name.strip().lower() or "auto"
    if wanted not in NAMES:
        raise ValueError(f"kernel {name!r} is not supported; expected rust or numpy")
    if wanted == "numpy":
        from cpersona import _fallback

        return _fallback
    try:
        from cpersona import _core
    except ImportError:
        if wanted == "rust" or os.environ.get("CPERSONA_REQUIRE_RUST") == "1":
            raise
        from cpersona import _fallback

        return _fallback
    return _core


def name_of(kernels: ModuleType) -> str:
    """`rust` or `numpy`: which backend a module from `load` is."""
    return "numpy" if kernels.KERNEL == "numpy" else "rust"


def from_environment() -> ModuleType:
    """The kernels CPERSONA_KERNEL names, read now: for code that runs without an engine
    (benchmarks, child processes of tests)."""
    return load(os.environ.get("CPERSONA_KERNEL", ""))
