"""Model-based test of the always-current vector index (issue 3 item 3).

Random sequences of writes (the engine's write tools, and direct SQL as an import, a repair or
another program writes) across agents, projects and channels; after every step the index scan
must equal the SQLite window scan and an independent reference, exactly, for random queries,
scopes and window parameters, on both kernel backends. At the end `verify()` finds nothing.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import cpersona.vectors.index as index_mod
import numpy as np
import pytest
from cpersona.engine import Engine
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from vecindex_support import (
    TABLES,
    IntEmbedder,
    Probe,
    blob,
    check_probe,
    int_vector,
    new_engine,
    scope,
)

pytestmark = pytest.mark.slow  # model-based runs of the index against SQLite's scan

DIM = 7
AGENTS = ("a", "b", "")  # '' is a real agent bucket
PROJECTS = ("", "p1", "p2")
CHANNELS = ("", "c1")
# Source shapes: none, string ids sharing prefixes, a numeric id (compared as its text), a
# canonical {type, id, name} object, a source without an id, non-ASCII ids (prefixes count
# characters, not bytes), an empty id, and an id holding LIKE wildcards.
SOURCES: tuple[Any, ...] = (
    None,
    {"id": "s1"},
    {"id": "s12"},
    {"id": "s2"},
    {"id": "t9"},
    {"id": 7},
    {"type": "User", "id": "s1x", "name": "n"},
    {"type": "User", "name": "no id"},
    {"id": "日本語"},
    {"id": "😀s1"},
    {"id": ""},
    {"id": "s%_1"},
)
PREFIXES = ("", "", "s", "s1", "s12", "7", "t", "zz", "日", "日本", "😀", "😀s", "s%", "s_")
# Canonical stamps an import carries: the past, before 1970 (a negative key), the future.
OLD_STAMPS = (
    "2020-01-01 00:00:00",
    "2020-01-01 00:00:01",
    "2023-06-01 12:00:00",
    "1969-12-31 23:59:59",
    "2099-01-01 00:00:00",
)
WORDS = ("alpha", "beta", "gamma", "delta", "zero", "eps", "zeta", "eta")

settings_model = settings(
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    deadline=None,
)

texts = st.builds(lambda a, b: f"{a} {b}", st.sampled_from(WORDS), st.integers(0, 11))


class World:
    """An engine on a fresh file database and the write steps the test draws from."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.db = engine.db
        self.w = engine.writer

    def ids(self, table: str) -> list[int]:
        return [int(r[0]) for r in self.db.query(f"SELECT id FROM {table} ORDER BY id")]

    def pick(self, data: st.DataObject, table: str) -> int | None:
        ids = self.ids(table)
        return data.draw(st.sampled_from(ids), label=f"{table} id") if ids else None

    def owner(self, table: str, row: int) -> str:
        """The agent of row `row`, as the tools that check ownership are called with it."""
        return str(self.db.query_one(f"SELECT agent_id FROM {table} WHERE id=?", (row,))[0])

    @staticmethod
    def place(data: st.DataObject) -> tuple[str, str, str]:
        """An (agent, project, channel) to write to."""
        return (
            data.draw(st.sampled_from(AGENTS)),
            data.draw(st.sampled_from(PROJECTS)),
            data.draw(st.sampled_from(CHANNELS)),
        )

    # -- steps: each draws its own arguments and returns a short description -----------------

    def store(self, data: st.DataObject) -> str:
        agent, project, channel = self.place(data)
        message: dict[str, Any] = {"content": data.draw(texts)}
        source = data.draw(st.sampled_from(SOURCES))
        if source is not None:
            message["source"] = source
        out = self.w.store(agent, message, channel, project)
        assert out["ok"], out
        return f"store {agent}/{project}/{channel} -> {out.get('id')} {out['result']}"

    def update_memory(self, data: st.DataObject) -> str:
        row = self.pick(data, "memories")
        if row is None:
            return "update: none"
        out = self.w.update_memory(row, data.draw(texts), self.owner("memories", row))
        return f"update {row}: {out.get('ok')}"

    def delete_memory(self, data: st.DataObject) -> str:
        return self._delete(data, "memories")

    def archive_episode(self, data: st.DataObject) -> str:
        agent, project, channel = self.place(data)
        out = self.w.archive_episode(agent, data.draw(texts), [], "kw", False, project, channel)
        assert out["ok"], out
        return f"archive {agent}/{project}/{channel} -> {out['episode_id']}"

    def delete_episode(self, data: st.DataObject) -> str:
        return self._delete(data, "episodes")

    def _delete(self, data: st.DataObject, table: str) -> str:
        """The delete tool of `table` on one of its rows, as its owner."""
        row = self.pick(data, table)
        if row is None:
            return f"delete {table}: none"
        delete = self.w.delete_memory if table == "memories" else self.w.delete_episode
        out = delete(row, self.owner(table, row))
        assert out["ok"], out
        return f"delete {table} {row}"

    def import_rows(self, data: st.DataObject) -> str:
        """Rows as an import writes them: an explicit old `created_at`, several in one second."""
        table = data.draw(st.sampled_from(TABLES))
        stamp = data.draw(st.sampled_from(OLD_STAMPS))
        n = data.draw(st.integers(1, 4))
        with self.db.atomic() as conn:
            for _ in range(n):
                agent, project, channel = self.place(data)
                emb = self._embedding(data)
                if table == "memories":
                    source = data.draw(st.sampled_from(SOURCES))
                    conn.execute(
                        "INSERT OR IGNORE INTO memories(agent_id, project_id, channel, content, "
                        "source, timestamp, created_at, embedding) VALUES (?,?,?,?,?,?,?,?)",
                        (
                            agent,
                            project,
                            channel,
                            data.draw(texts) + " imported",
                            json.dumps(source or {}),
                            stamp,
                            stamp,
                            emb,
                        ),
                    )
                else:
                    conn.execute(
                        "INSERT INTO episodes(agent_id, project_id, channel, summary, created_at, "
                        "embedding) VALUES (?,?,?,?,?,?)",
                        (agent, project, channel, data.draw(texts), stamp, emb),
                    )
        return f"import {n} {table} at {stamp}"

    def _embedding(self, data: st.DataObject) -> bytes | None:
        kind = data.draw(st.sampled_from(["int", "int", "int", "null", "foreign", "odd", "empty"]))
        if kind == "int":
            return blob(int_vector(data.draw(texts), DIM))
        if kind == "null":
            return None
        if kind == "foreign":
            return blob(int_vector(data.draw(texts), 8))
        if kind == "odd":
            return b"\x01\x02\x03\x04\x05\x06"  # not a whole number of floats
        return b""

    def set_embedding(self, data: st.DataObject) -> str:
        """NULL, foreign width, a broken BLOB, or a fresh vector, written by plain SQL."""
        return self._update(data, "set", lambda table: ("embedding", self._embedding(data)))

    def move_row(self, data: st.DataObject) -> str:
        """A repair moves a row to another scope or time (every column the triggers watch)."""

        def assignment(table: str) -> tuple[str, object]:
            column = data.draw(
                st.sampled_from(
                    ["agent_id", "project_id", "channel", "created_at"]
                    + (["source"] if table == "memories" else [])
                )
            )
            value: Any = {
                "agent_id": st.sampled_from(AGENTS),
                "project_id": st.sampled_from(PROJECTS),
                "channel": st.sampled_from(CHANNELS),
                "created_at": st.sampled_from(OLD_STAMPS),
                "source": st.sampled_from(SOURCES).map(lambda s: json.dumps(s or {})),
            }[column]
            return column, data.draw(value)

        return self._update(data, "move", assignment)

    def _update(
        self, data: st.DataObject, step: str, assignment: Callable[[str], tuple[str, object]]
    ) -> str:
        """A row of a drawn table set by plain SQL to the (column, value) `assignment(table)`
        draws; a change the dedup indexes forbid is skipped (OR IGNORE)."""
        table = data.draw(st.sampled_from(TABLES))
        row = self.pick(data, table)
        if row is None:
            return f"{step}: none"
        column, value = assignment(table)
        with self.db.atomic() as conn:
            conn.execute(f"UPDATE OR IGNORE {table} SET {column}=? WHERE id=?", (value, row))
        return f"{step} {table} {row} {column}={value!r}"

    def delete_agent(self, data: st.DataObject) -> str:
        agent = data.draw(st.sampled_from(AGENTS))
        with self.db.atomic() as conn:
            conn.execute("DELETE FROM memories WHERE agent_id=?", (agent,))
            conn.execute("DELETE FROM episodes WHERE agent_id=?", (agent,))
        return f"delete agent {agent}"

    def rebuild(self, data: st.DataObject) -> str:
        table = data.draw(st.sampled_from(TABLES))
        self.engine.indexes[table].rebuild()
        return f"rebuild {table}"

    STEPS = (
        "store",
        "store",
        "store",
        "store",
        "update_memory",
        "delete_memory",
        "archive_episode",
        "archive_episode",
        "delete_episode",
        "import_rows",
        "import_rows",
        "set_embedding",
        "move_row",
        "delete_agent",
        "rebuild",
    )

    # -- probes ------------------------------------------------------------------------------

    def probe(self, data: st.DataObject) -> Probe:
        table = data.draw(st.sampled_from(TABLES))
        query = self._query(data, table)
        sc = scope(
            data.draw(st.sampled_from((*AGENTS, "nobody"))),
            data.draw(st.sampled_from((None, "", "p1", "p2", "p9"))),
            data.draw(st.sampled_from((*CHANNELS, "c9"))),
            data.draw(st.sampled_from(PREFIXES)),
        )
        window = data.draw(st.sampled_from((0, 1, 2, 3, 5, 8, 1000)))
        reach = data.draw(
            st.one_of(
                st.just(0),
                st.integers(0, window),
                st.integers(window, window + 10),
                st.just(window + 1000),
            )
        )
        threshold = data.draw(
            st.one_of(
                st.sampled_from((-1000.0, -3.0, 0.0, 1.0, 4.0)), st.integers(-8, 8).map(float)
            )
        )
        k = data.draw(st.sampled_from((0, 1, 2, 3, 1000)))
        far_k = data.draw(st.sampled_from((0, 1, 2, 1000)))
        chunk = data.draw(st.sampled_from((1, 2, 3, 512)))
        return Probe(table, query, sc, window, reach, threshold, k, far_k, chunk)

    def _query(self, data: st.DataObject, table: str) -> np.ndarray:
        kind = data.draw(st.sampled_from(["row", "row", "text", "zero", "foreign"]))
        if kind == "row":
            rows = self.db.query(
                f"SELECT embedding FROM {table} WHERE {self.db.ops.byte_length('embedding')} = ?",
                (4 * DIM,),
            )
            if rows:
                raw = data.draw(st.sampled_from([bytes(r[0]) for r in rows]))
                return np.frombuffer(raw, dtype="<f4").copy()
        if kind == "zero":
            return np.zeros(DIM, dtype=np.float32)
        if kind == "foreign":
            return int_vector(data.draw(texts), 8)
        return int_vector(data.draw(texts), DIM)


def run_model(data: st.DataObject, max_steps: int, kernels: ModuleType) -> None:
    with tempfile.TemporaryDirectory(prefix="cpersona-model-") as tmp:
        engine = new_engine(Path(tmp) / "m.db", IntEmbedder(DIM))
        try:
            world = World(engine)
            steps = data.draw(st.integers(1, max_steps), label="steps")
            for _ in range(steps):
                step = data.draw(st.sampled_from(World.STEPS), label="step")
                note = getattr(world, step)(data)
                data.draw(st.just(note), label="did")
                for _ in range(2):
                    check_probe(engine.db, engine.indexes, world.probe(data), kernels=kernels)
            for table in TABLES:
                assert engine.indexes[table].verify() == []
                status = engine.indexes[table].status()
                assert status.usable and status.reason == "current", status
        finally:
            engine.close()


@pytest.mark.parametrize("small", [False, True], ids=["default-headroom", "tiny-headroom"])
@settings_model
@given(data=st.data())
def test_index_scan_equals_sqlite_scan(
    kernels: ModuleType, small: bool, data: st.DataObject, monkeypatch: pytest.MonkeyPatch
) -> None:
    """tiny-headroom: every few writes grow the file, compact it, and trim the log."""
    with monkeypatch.context() as m:
        if small:
            m.setattr(index_mod, "HEADROOM", 1)
            m.setattr(index_mod, "TRIM_EVERY", 3)
        run_model(data, max_steps=25, kernels=kernels)


def test_in_memory_database(kernels: ModuleType) -> None:
    """A `:memory:` database keeps its index in a private temporary directory, same answers."""
    engine = new_engine(":memory:", IntEmbedder(DIM))
    directory = engine.indexes["memories"].path.parent
    try:
        for i in range(30):
            engine.writer.store(
                AGENTS[i % 2], {"content": f"{WORDS[i % 8]} {i}"}, "", PROJECTS[i % 3]
            )
            if i % 4 == 0:
                engine.writer.archive_episode("a", f"episode {i}", [], "", False, "", "")
        engine.writer.delete_memory(3, "a")
        for table in TABLES:
            for agent in AGENTS:
                for window, reach in ((5, 20), (0, 0), (100, 0)):
                    probe = Probe(
                        table, int_vector("alpha 1", DIM), scope(agent), window, reach, 0.0, 4, 4
                    )
                    check_probe(engine.db, engine.indexes, probe, kernels=kernels)
            assert engine.indexes[table].verify() == []
        assert directory.exists()
    finally:
        engine.close()
    assert not directory.exists()
