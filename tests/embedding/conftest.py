"""Fixtures of the embedding tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from embedding_fakes import Backend


@pytest.fixture
def backend() -> Iterator[Backend]:
    """A fresh loopback backend; it answers HTTP 500 until the test scripts it."""
    with Backend() as server:
        yield server
