"""Random arguments for the portability tools: always a documented shape, never a crash, and no
file written outside the export directory."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from cpersona.config import Settings
from cpersona.embedding.hashing import HashingProvider
from cpersona.engine import Engine
from hypothesis import strategies as st
from support import fuzz
from support.mcp_client import call_all, documented_answer

TOOL_ARGS = {
    "export_memories": ["agent_id", "output_path", "include_embeddings"],
    "import_memories": ["input_path", "target_agent_id", "dry_run", "session_key"],
    "merge_memories": ["source_agent_id", "target_agent_id", "strategy", "mode", "dry_run",
                       "session_key"],
    "migrate_channel_axis": ["agent_id", "dry_run", "globalize_unrecoverable", "session_key"],
    "delete_agent_data": ["agent_id", "session_key"],
    "store": ["agent_id", "message", "channel"],
}  # fmt: skip

texts = fuzz.texts(30, ["", "alice", "bob", "skip", "copy", "move", "discord", "\ud800"])
json_values = fuzz.json_values(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), texts),
    size=3,
    leaves=8,
)
paths = st.one_of(
    st.sampled_from([
        "all.jsonl", "alice.jsonl", "sub/new.jsonl", "bad.jsonl", "../x.jsonl", "/tmp",
        "/etc/passwd", "", ".", "sub", "a\x00b",
    ]),
    st.text(max_size=20),
)  # fmt: skip
messages = st.fixed_dictionaries(
    {"content": st.sampled_from(["kettle", "tea", "pot", "spoon"])},
    optional={"metadata": st.sampled_from([{}, {"session_id": "12:3"}, {"session_id": "x"}])},
)


def argument(name: str) -> st.SearchStrategy[Any]:
    if name in ("output_path", "input_path"):
        return st.one_of(paths, json_values)
    if name == "message":
        return messages
    if name in ("agent_id", "source_agent_id", "target_agent_id"):
        return st.one_of(st.sampled_from(["", "alice", "bob", "carol"]), json_values)
    return st.one_of(texts, json_values)


def calls() -> st.SearchStrategy[tuple[str, dict[str, Any]]]:
    return fuzz.calls(TOOL_ARGS, argument, json_values)


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    root = Path(tmp_path_factory.mktemp("portability-fuzz"))
    exports = root / "exports"
    exports.mkdir()
    (exports / "bad.jsonl").write_text('{"_type": "memory"\n[]\n', encoding="utf-8")
    engine = Engine(
        Settings(db_path=str(root / "fuzz.db"), embedding_mode="hashing",
                 export_dir=str(exports), operating_context_path=str(root / "no-oc.toml")),
        embedder=HashingProvider(),
    )  # fmt: skip
    yield engine
    engine.close()
    fuzz.assert_intact(root / "fuzz.db")
    outside = {p.name for p in root.iterdir()} - {
        "exports",
        "fuzz.db",
        "fuzz.db-wal",
        "fuzz.db-shm",
    }
    assert not {n for n in outside if not n.startswith("fuzz.db.")}, outside


def check(tool: str, result: Any) -> None:
    out = documented_answer(tool, result)
    if out is None or "error" in out:
        return
    if tool == "migrate_channel_axis":
        assert "ok" not in out and isinstance(out["recoverable_by_channel"], list)
    elif tool == "store":
        assert out["result"] in ("stored", "skipped", "rejected"), out
    else:
        assert out["ok"] is True, (tool, out)


@fuzz.batches(calls(), examples=40)
def test_portability_fuzz_documented_shapes(engine, batch):
    anyio.run(call_all, engine, batch, check)
