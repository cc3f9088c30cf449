"""The fixtures every test directory shares, each defined once (the code is in tests/support/):

- `store_backend` ("sqlite" / "postgresql"), `kernel` ("rust" / "numpy") and `kernels` (its
  module): the backends a test runs on (support/backends.py says how they are parametrised);
- `pg_url`, `database_url_for`, `own_pg`: PostgreSQL databases (tests/pg_support.py);
- `sample_db`: a private copy of the CPersona 2.5.12 sample (support/fixtures.py);
- `make_engine`, `oc_path`, `export_dir`: engines (support/engine.py), with `engine_defaults`,
  the settings a directory's conftest may give all its engines;
- `connect` and `tools`: black-box MCP clients over them (support/mcp_client.py).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from hypothesis import HealthCheck
from hypothesis import settings as hyp_settings
from support import backends
from support.engine import OC_FILE, EngineFactory
from support.fixtures import SAMPLE, copy_database
from support.mcp_client import Tools, in_memory

hyp_settings.register_profile("dev", max_examples=50, deadline=None)
hyp_settings.register_profile(
    "ci", max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
hyp_settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(autouse=True, scope="session")
def _cache_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Index files of PostgreSQL databases go to the cache directory (docs/fts-index.md): the
    test run's own, never the user's ~/.cache (servers started by tests inherit it). Session
    scope: module-scoped servers start before any function-scoped fixture."""
    before = os.environ.get("XDG_CACHE_HOME")
    os.environ["XDG_CACHE_HOME"] = str(tmp_path_factory.getbasetemp() / "xdg-cache")
    yield
    if before is None:
        os.environ.pop("XDG_CACHE_HOME", None)
    else:
        os.environ["XDG_CACHE_HOME"] = before


# -- backends ------------------------------------------------------------------------------


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    backends.parametrize(metafunc)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The modules with a `slow` test first, each kept whole and in order: the workers
    (pytest-xdist, one module per worker at a time) start the longest modules early instead of
    one of them finishing alone at the end. The order is the same in every worker."""
    slow = {item.nodeid.split("::")[0] for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.nodeid.split("::")[0] not in slow)


@pytest.fixture
def store_backend(request: pytest.FixtureRequest) -> str:
    """The database a test runs on: "sqlite" or "postgresql"."""
    return str(request.param)


# Session scope: a kernel holds no state, and Hypothesis refuses function-scoped fixtures.
@pytest.fixture(scope="session")
def kernel(request: pytest.FixtureRequest) -> str:
    """The kernel backend a test runs on, as `Settings.kernel` names it: "rust" or "numpy"."""
    name = str(request.param)
    backends.load_kernels(name)  # the Rust case skips where the extension is not built
    return name


@pytest.fixture(scope="session")
def kernels(kernel: str) -> ModuleType:
    """The module of the test's `kernel` (`cpersona._core` or `cpersona._fallback`)."""
    return backends.load_kernels(kernel)


@pytest.fixture(scope="session")
def rust_kernels() -> ModuleType:
    return backends.load_kernels("rust")


@pytest.fixture(scope="session")
def numpy_kernels() -> ModuleType:
    return backends.load_kernels("numpy")


# PostgreSQL for the tests: `pg_url` (a fresh database), `database_url_for`, `own_pg`.
from pg_support import database_url_for, own_pg, pg_url  # noqa: E402, F401

# -- engines and clients -------------------------------------------------------------------


@pytest.fixture
def sample_db(tmp_path: Path) -> Path:
    """A private, writable copy of the CPersona 2.5.12 sample (skips where it is absent)."""
    return copy_database(SAMPLE, tmp_path / "sample.db")


@pytest.fixture
def engine_defaults() -> dict[str, Any]:
    """Settings every engine of a test gets below its own overrides (a directory may say)."""
    return {}


@pytest.fixture
def make_engine(
    tmp_path: Path,
    database_url_for: Callable[[str], str | None],  # noqa: F811 (the fixture imported above)
    engine_defaults: dict[str, Any],
) -> Iterator[EngineFactory]:
    """`make_engine(db_path="mem.db", embedder=None, **settings_overrides)` (support/engine.py)."""
    factory = EngineFactory(tmp_path, database_url_for, engine_defaults)
    yield factory
    factory.close()


@pytest.fixture
def oc_path(tmp_path: Path) -> Path:
    """The operating-context file every engine of the test reads (absent until written)."""
    return tmp_path / OC_FILE


@pytest.fixture
def export_dir(tmp_path: Path) -> Path:
    """An export directory in the test's directory (portability/conftest.py gives it to every
    engine there)."""
    path = tmp_path / "exports"
    path.mkdir()
    return path


@pytest.fixture
def connect(make_engine: EngineFactory) -> Callable[..., Any]:
    """`async with connect(**settings_overrides) as tools:` a client over a new engine."""

    def open_client(**overrides: Any) -> Any:
        return in_memory(make_engine(**overrides))

    return open_client


@pytest.fixture
async def tools(connect: Callable[..., Any]) -> AsyncIterator[Tools]:
    async with connect() as t:
        yield t
