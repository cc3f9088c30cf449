"""Fixtures of the embedding tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from embedding_fakes import EmbeddingService


@pytest.fixture
def embedding_service() -> Iterator[EmbeddingService]:
    """A fresh loopback embedding service; it answers HTTP 500 until the test scripts it."""
    with EmbeddingService() as server:
        yield server
