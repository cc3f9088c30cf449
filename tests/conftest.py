"""Shared fixtures: settings on a temporary database, an Engine with the hashing embedder."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck
from hypothesis import settings as hyp_settings

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


# PostgreSQL for the tests: `pg_url` (a fresh database) and `backend` (sqlite / postgresql).
from pg_support import backend, database_url_for, own_pg, pg_url  # noqa: E402, F401
