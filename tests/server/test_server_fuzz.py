"""Random arguments for every tool: the answer is always a documented shape, never a crash.

Each tool gets dicts of its own argument names (plus stray ones) holding random JSON values of
the right or the wrong type: huge and negative integers, floats, unicode (lone surrogates
included), nested lists and objects. The property (surface.md §1.2-§1.3): a schema violation
answers `isError` with `Input validation error`; anything else is JSON whose `error`, when
present, comes with `ok: false` (a bare `{"error"}` would be an exception escaping a handler).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
from cpersona.config import Settings
from cpersona.embedding.hashing import HashingProvider
from cpersona.engine import Engine
from cpersona.server.app import build_server
from hypothesis import strategies as st
from mcp import Client
from support import fuzz
from support.mcp_client import documented_answer

TOOL_ARGS = {
    "store": ["agent_id", "message", "channel", "project_id", "session_key"],
    "archive_episode": ["agent_id", "summary", "history", "keywords", "resolved", "project_id",
                        "channel", "session_key"],
    "update_memory": ["memory_id", "content", "agent_id", "session_key"],
    "lock_memory": ["memory_id", "agent_id", "session_key"],
    "unlock_memory": ["memory_id", "agent_id", "session_key"],
    "delete_memory": ["memory_id", "agent_id", "session_key"],
    "delete_episode": ["episode_id", "agent_id", "session_key"],
    "get_profile": ["agent_id"],
    "update_profile": ["agent_id", "profile", "session_key"],
    "list_memories": ["agent_id", "limit", "project_id"],
    "list_episodes": ["agent_id", "limit", "project_id"],
    "declare_associations": ["agent_id", "associations", "anchor_ref", "retract", "channel",
                             "project_id", "session_key"],
    "traverse": ["agent_id", "entity", "max_hops", "limit", "channel", "project_id",
                 "source_id"],
}  # fmt: skip

texts = fuzz.texts(40, ["", " ", "alice", "bob", "[Memory from x]", "@auto", "\ud800", "a\udfffb"])
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=-3, max_value=5),
    st.floats(allow_nan=False, allow_infinity=False),
    texts,
)
json_values = fuzz.json_values(scalars, size=4, leaves=12)
messages = st.fixed_dictionaries(
    {},
    optional={
        "id": st.one_of(texts, json_values),
        "content": st.one_of(texts, json_values),
        "source": st.one_of(
            st.none(),
            texts,
            st.dictionaries(
                st.sampled_from(["type", "id", "name", "User", "System"]), json_values, max_size=3
            ),
            json_values,
        ),
        "timestamp": st.one_of(texts, st.just("2999-01-01T00:00:00Z"), json_values),
        "metadata": json_values,
    },
)


def argument(name: str) -> st.SearchStrategy[Any]:
    if name == "message":
        return st.one_of(messages, json_values)
    if name == "associations":
        return st.one_of(
            st.fixed_dictionaries(
                {},
                optional={
                    "entities": st.one_of(
                        st.lists(
                            st.fixed_dictionaries(
                                {"name": texts}, optional={"aliases": st.lists(texts, max_size=2)}
                            ),
                            max_size=3,
                        ),
                        json_values,
                    ),
                    "relations": st.one_of(
                        st.lists(
                            st.fixed_dictionaries(
                                {
                                    "subject": st.one_of(texts, st.just("mem:1")),
                                    "predicate": texts,
                                    "object": st.one_of(texts, st.just("mem:2")),
                                }
                            ),
                            max_size=3,
                        ),
                        json_values,
                    ),
                },
            ),
            json_values,
        )
    if name in ("memory_id", "episode_id", "limit", "max_hops"):
        return st.one_of(st.integers(min_value=-2, max_value=6), st.integers(), json_values)
    if name == "history":
        return st.one_of(
            st.lists(st.dictionaries(st.just("timestamp"), texts, max_size=1), max_size=3),
            json_values,
        )
    return st.one_of(texts, json_values)


def calls() -> st.SearchStrategy[tuple[str, dict[str, Any]]]:
    return fuzz.calls(TOOL_ARGS, argument, json_values)


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Engine:
    path = Path(tmp_path_factory.mktemp("fuzz")) / "fuzz.db"
    engine = Engine(
        Settings(db_path=str(path), embedding_mode="hashing"), embedder=HashingProvider()
    )
    yield engine
    engine.close()
    fuzz.assert_intact(path)


def check(tool: str, result: Any) -> None:
    out = documented_answer(tool, result)
    if out is None:
        return
    if tool == "store":
        assert out["result"] in ("stored", "skipped", "rejected"), out
        assert out["ok"] is (out["result"] != "rejected")
    elif tool in ("list_memories", "list_episodes"):
        key = tool.split("_")[1]
        assert isinstance(out[key], list) and out["count"] == len(out[key])
    elif tool == "get_profile" and "error" not in out:
        assert set(out) == {"profile"}
    elif tool == "declare_associations":
        assert out["result"] in ("declared", "skipped", "rejected"), out
        assert isinstance(out["dropped"], list) and isinstance(out["relations"], list)
    elif tool == "traverse":  # 2.6.14's answer has no `ok`: its collections are always there
        assert isinstance(out["entities"], list) and isinstance(out["relations"], list), out
    elif "ok" not in out:
        raise AssertionError((tool, out))


@fuzz.batches(calls(), examples=100)
def test_random_arguments_get_documented_shapes(engine, batch):
    async def run() -> None:
        async with Client(build_server(engine), raise_exceptions=True) as client:
            for tool, args in batch:
                check(tool, await client.call_tool(tool, args))
            # Still serving after the batch.
            listed = await client.call_tool("list_memories", {"limit": 1})
            assert not listed.is_error

    anyio.run(run)
