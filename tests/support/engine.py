"""The engine factory of the tests: engines over the test's temporary directory, on the test's
database backend, with the hashing embedder unless told otherwise, closed after the test.

Every engine gets an operating-context path inside the test's directory, so nothing in the
developer's home leaks into a test (a test writes the `oc_path` fixture's file to wake the
operating context up).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from cpersona.config import Settings
from cpersona.embedding.base import EmbeddingProvider
from cpersona.embedding.hashing import HashingProvider
from cpersona.engine import Engine

#: The operating-context file of every engine, in the test's directory (absent until written).
OC_FILE = "operating-context.toml"
#: `embedder=FROM_SETTINGS`: no embedder given; the engine builds the one its settings name.
FROM_SETTINGS: Any = object()


class EngineFactory:
    """`make_engine(db_path="mem.db", embedder=None, **settings_overrides)`.

    A relative `db_path` is a file in the test's directory. On PostgreSQL each distinct
    `db_path` is a fresh database of its own (`database_url_for`), unless the overrides give a
    `database_url`. `defaults`: settings of a test directory's own, below the overrides (and
    its `embedder`, below the one given).
    """

    def __init__(
        self,
        directory: Path,
        database_url_for: Callable[[str], str | None],
        defaults: Mapping[str, Any],
    ) -> None:
        self.directory = directory
        self.database_url_for = database_url_for
        self.defaults = dict(defaults)
        self.engines: list[Engine] = []

    @property
    def oc_path(self) -> Path:
        return self.directory / OC_FILE

    def settings(self, **overrides: Any) -> Settings:
        given = {**self.defaults, **overrides}
        given.pop("embedder", None)
        path = str(given.pop("db_path", "mem.db"))
        if path != ":memory:":
            path = str(self.directory / path)
        if "database_url" not in given:
            given["database_url"] = self.database_url_for(path)
        base = Settings(
            db_path=path,
            embedding_mode="hashing",
            operating_context_path=str(self.oc_path),
        )
        return dataclasses.replace(base, **given)

    def __call__(self, embedder: EmbeddingProvider | None = None, **overrides: Any) -> Engine:
        embedder = embedder or self.defaults.get("embedder")
        if embedder is FROM_SETTINGS:
            engine = Engine(self.settings(**overrides))
        else:
            engine = Engine(self.settings(**overrides), embedder=embedder or HashingProvider())
        self.engines.append(engine)
        return engine

    def close(self) -> None:
        for engine in reversed(self.engines):
            engine.close()
