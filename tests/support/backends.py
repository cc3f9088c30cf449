"""The backends a test runs on, one fixture name per meaning:

- `store_backend`: the database, "sqlite" or "postgresql" (tests/pg_support.py serves the
  latter); `database_url_for` gives the Settings.database_url for it.
- `kernel`: the kernel backend's name, "rust" or "numpy", as `Settings.kernel` takes it;
  `kernels` is its module (`cpersona._backend.load`), for tests of the kernels themselves.

`parametrize` (the one `pytest_generate_tests` of tests/conftest.py) runs a test that takes
either once per value, and one that takes both once per pair of PAIRS. A test that names one of
them in its own `pytest.mark.parametrize` keeps its choice; `pytest.mark.runs_on(kernel=...,
store_backend=...)` (a name or a tuple of names) narrows them for a test or a whole module, and
leaves the tests that take neither alone.
"""

from __future__ import annotations

import os
from types import ModuleType
from typing import Any

import pytest
from cpersona import _backend

STORES = ("sqlite", "postgresql")
KERNELS = ("rust", "numpy")
#: The kernels do not depend on the database, so the numpy twin runs on SQLite only; on
#: PostgreSQL it could not run anyway: it has no full-text index, and there is no FTS5 there.
PAIRS = (("rust", "sqlite"), ("numpy", "sqlite"), ("rust", "postgresql"))


def parametrize(metafunc: pytest.Metafunc) -> None:
    marked = _marked(metafunc)
    wanted = [
        n for n in ("kernel", "store_backend") if n in metafunc.fixturenames and n not in marked
    ]
    only: dict[str, Any] = {}
    for mark in metafunc.definition.iter_markers("runs_on"):
        only = {**mark.kwargs, **only}  # the closest mark wins
    kernels = _names(only.get("kernel", KERNELS))
    stores = _names(only.get("store_backend", STORES))
    if wanted == ["kernel", "store_backend"]:
        pairs = [(k, s) for k, s in PAIRS if k in kernels and s in stores]
        ids = ["-".join(pair) for pair in pairs]
        metafunc.parametrize(("kernel", "store_backend"), pairs, indirect=True, ids=ids)
    elif wanted == ["kernel"]:
        metafunc.parametrize("kernel", kernels, indirect=True)
    elif wanted == ["store_backend"]:
        metafunc.parametrize("store_backend", stores, indirect=True)


def _names(value: str | tuple[str, ...]) -> tuple[str, ...]:
    return (value,) if isinstance(value, str) else tuple(value)


def _marked(metafunc: pytest.Metafunc) -> set[str]:
    """The argument names the test's own parametrize marks set."""
    names: set[str] = set()
    for mark in metafunc.definition.iter_markers("parametrize"):
        argnames = mark.args[0] if mark.args else mark.kwargs["argnames"]
        if isinstance(argnames, str):
            argnames = argnames.split(",")
        names.update(n.strip() for n in argnames)
    return names


def load_kernels(name: str) -> ModuleType:
    """The kernels `name` selects; without the extension the Rust case skips (fails with
    CPERSONA_REQUIRE_RUST=1, as CI sets it)."""
    try:
        return _backend.load(name)
    except ImportError as exc:
        if os.environ.get("CPERSONA_REQUIRE_RUST") == "1":
            pytest.fail(f"CPERSONA_REQUIRE_RUST=1 but cpersona._core does not import: {exc}")
        pytest.skip("cpersona._core is not built")
