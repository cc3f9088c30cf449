"""Fixtures of the HTTP transport tests: an in-process Engine for the dispatch-order checks (the
server processes themselves are started by `http_support.HttpServer`)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from cpersona.config import Settings
from cpersona.embedding.hashing import HashingProvider
from cpersona.engine import Engine


@pytest.fixture
def make_engine(tmp_path: Path) -> Iterator[Callable[[], Engine]]:
    engines: list[Engine] = []

    def make() -> Engine:
        settings = Settings(db_path=str(tmp_path / "mem.db"), embedding_mode="hashing")
        engine = Engine(settings, embedder=HashingProvider())
        engines.append(engine)
        return engine

    yield make
    for engine in engines:
        engine.close()
