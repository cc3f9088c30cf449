"""Selects the kernel backend once: the Rust extension when built, else the numpy fallback.

`CPERSONA_KERNEL=rust|numpy` overrides. With `CPERSONA_REQUIRE_RUST=1` a missing extension is
an error rather than a silent fallback (CI sets it).
"""

from __future__ import annotations

import os
from types import ModuleType


def _select() -> tuple[str, ModuleType]:
    wanted = os.environ.get("CPERSONA_KERNEL", "").strip().lower() or "auto"
    if wanted not in ("auto", "rust", "numpy"):
        raise ImportError(f"CPERSONA_KERNEL={wanted!r} is not supported; expected rust or numpy")
    if wanted == "numpy":
        from cpersona import _fallback

        return "numpy", _fallback
    try:
        from cpersona import _core
    except ImportError:
        if wanted == "rust" or os.environ.get("CPERSONA_REQUIRE_RUST") == "1":
            raise
        from cpersona import _fallback

        return "numpy", _fallback
    return "rust", _core


BACKEND, kernels = _select()
KERNEL: str = getattr(kernels, "KERNEL", "numpy")
