"""The churn tests start real HTTP servers with `tests/http/http_support.py`."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from cpersona.config import Settings
from cpersona.embedding.hashing import HashingProvider
from cpersona.engine import Engine

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "http"))


@pytest.fixture
def make_engine(tmp_path: Path) -> Iterator[Callable[[], Engine]]:
    engines: list[Engine] = []

    def make() -> Engine:
        engine = Engine(
            Settings(db_path=str(tmp_path / "mem.db"), embedding_mode="hashing"),
            embedder=HashingProvider(),
        )
        engines.append(engine)
        return engine

    yield make
    for engine in engines:
        engine.close()
