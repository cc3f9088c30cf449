"""Shared fixtures: settings on a temporary database, an Engine with the hashing embedder."""

from __future__ import annotations

import os

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


# PostgreSQL for the tests: `pg_url` (a fresh database) and `backend` (sqlite / postgresql).
from pg_support import backend, database_url_for, pg_url  # noqa: E402, F401
