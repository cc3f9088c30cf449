"""Degraded recall: no (or failing) embeddings, FTS / keyword results and the `advisory`.

With CPERSONA_EMBEDDING_MODE=none every recall is in `hint`; a failing backend latches
`fault` on the second consecutive failure. While degraded, recall answers from the lexical
channels and attaches an advisory: the full runbook the first time per session (or process),
then a `Reminder:`. CPERSONA_DEGRADED_ADVISORY=false removes the key, not the degradation.
Spec: retrieval.md §13, §3.4 (forwarding).
"""

from __future__ import annotations

import socket
from collections.abc import Iterator

import numpy as np
import pytest
from cpersona.embedding.hashing import HashingProvider
from cpersona.embedding.http import HttpProvider
from cpersona.embedding.none import NoneProvider
from cpersona.errors import EmbeddingUnavailable
from support.mcp_client import AGENT

pytestmark = pytest.mark.anyio

ADVISORY_KEYS = {"degraded", "severity", "reason", "evidence", "runbook", "advisory_scope"}
NOTES = [
    "the deploy pipeline runs on friday",
    "staging deploy needs manual approval",
    "lunch order is ramen on friday",
    "database backups run nightly",
]


def none_mode(**kw):
    return {"embedding_mode": "none", "embedder": NoneProvider(), **kw}


@pytest.fixture
def closed_port_url() -> Iterator[str]:
    """A URL whose port nothing listens on (connection refused), held bound without listening
    for the test: a port released at once may be taken meanwhile (a parallel worker's server)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        yield f"http://127.0.0.1:{s.getsockname()[1]}/embed"


class Flaky:
    """The hashing provider, failing while `down` is set."""

    available = True
    name = "flaky"

    def __init__(self) -> None:
        self.inner = HashingProvider()
        self.down = False

    def dim(self) -> int:
        return self.inner.dim()

    def embed(self, texts, *, kind="passage") -> np.ndarray:
        if self.down:
            raise EmbeddingUnavailable("backend said 503")
        return self.inner.embed(texts, kind=kind)

    def close(self) -> None:
        pass


async def test_none_mode_answers_lexically_with_a_hint(connect):
    async with connect(**none_mode()) as t:
        await t.store_all(NOTES)
        first = await t.recall("deploy", deep=True)
        second = await t.recall("deploy", deep=True)
    assert {m["content"] for m in first["messages"]} == {NOTES[0], NOTES[1]}
    assert all(m["match_reason"]["signal"] == "rrf" for m in first["messages"])
    advisory = first["advisory"]
    assert set(advisory) == ADVISORY_KEYS
    assert advisory["degraded"] is True and advisory["severity"] == "hint"
    assert advisory["advisory_scope"] == "session"
    assert isinstance(advisory["reason"], str) and advisory["reason"]
    assert advisory["runbook"].startswith("**Notify the user:**")
    assert "CPERSONA_DEGRADED_ADVISORY=false" in advisory["runbook"]
    reminder = second["advisory"]["runbook"]
    assert reminder.startswith("Reminder:") and "Notify the user" not in reminder
    assert second["messages"] == first["messages"]


async def test_none_mode_matches_the_lexical_channels_of_a_vector_engine(connect):
    async with connect(**none_mode()) as t:
        await t.store_all(NOTES)
        await t.episode("friday deploy retro", keywords="deploy retro")
        degraded = [await t.messages(q, deep=True) for q in ("deploy", "friday", "ramen")]
    async with connect() as t:  # same database: its rows have no vectors
        healthy = [await t.recall(q, deep=True) for q in ("deploy", "friday", "ramen")]
    assert all("advisory" not in h for h in healthy)
    assert degraded == [h["messages"] for h in healthy]


async def test_the_full_runbook_once_per_session(connect):
    async with connect(**none_mode()) as t:
        await t.store_all(NOTES)
        runbooks = [
            (await t.recall("deploy", session_key=key))["advisory"]["runbook"]
            for key in ("s1", "s1", "s2", "", "", " transport ", "s2")
        ]
    full = [r.startswith("**Notify the user:**") for r in runbooks]
    # s1 full then short; s2 full; the keyless bucket full once ("transport" is keyless).
    assert full == [True, False, True, True, False, False, False]


async def test_process_scope_for_keyless_http_callers(connect):
    async with connect(**none_mode(transport="streamable-http")) as t:
        keyless = (await t.recall("deploy"))["advisory"]
        keyed = (await t.recall("deploy", session_key="s1"))["advisory"]
    assert keyless["advisory_scope"] == "process"
    assert keyed["advisory_scope"] == "session"


async def test_degraded_advisory_false_removes_the_key(connect):
    async with connect(**none_mode(degraded_advisory=False)) as t:
        await t.store_all(NOTES)
        out = await t.recall("deploy", deep=True)
        ctx = await t(
            "recall_with_context",
            {"agent_id": AGENT, "query": "deploy", "deep": True, "external_context": []},
        )
    assert set(out) == {"messages"} and len(out["messages"]) == 2
    assert set(ctx) == {"messages"}


async def test_recall_with_context_forwards_the_one_advisory(connect):
    async with connect(**none_mode()) as t:
        await t.store_all(NOTES)
        ctx = await t(
            "recall_with_context", {"agent_id": AGENT, "query": "deploy", "external_context": []}
        )
        after = await t.recall("deploy")
    assert ctx["advisory"]["runbook"].startswith("**Notify the user:**")
    assert after["advisory"]["runbook"].startswith("Reminder:")


async def test_unreachable_http_backend_faults_after_two_failures(connect, closed_port_url):
    provider = HttpProvider(closed_port_url, timeout=2)
    async with connect(embedding_mode="http", embedder=provider) as t:
        await t.store_all(NOTES)  # stored without vectors
        first = await t.recall("deploy", deep=True)
        second = await t.recall("deploy", deep=True)
        third = await t.recall("friday", deep=True)
    assert "advisory" not in first
    assert {m["content"] for m in first["messages"]} == {NOTES[0], NOTES[1]}
    advisory = second["advisory"]
    assert advisory["severity"] == "fault" and "unreachable" in advisory["reason"]
    assert advisory["evidence"] and advisory["runbook"].startswith("**Notify the user:**")
    assert "CPERSONA_EMBEDDING_URL" in advisory["runbook"]
    reminder = third["advisory"]["runbook"]
    assert reminder.startswith("Reminder:") and advisory["evidence"] in reminder


async def test_misconfigured_http_backend_faults_as_misconfigured(connect):
    async with connect(embedding_mode="http", embedder=HttpProvider("", timeout=2)) as t:
        await t.recall("deploy")
        out = await t.recall("deploy")
    assert out["advisory"]["severity"] == "fault"
    assert "misconfigured" in out["advisory"]["reason"]
    assert "CPERSONA_EMBEDDING_MODE" in out["advisory"]["runbook"]


async def test_recovery_clears_the_advisory_and_cache_hits_change_nothing(connect):
    flaky = Flaky()
    async with connect(embedding_mode="http", embedder=flaky) as t:
        await t.store_all(NOTES)
        healthy = await t.recall("deploy", deep=True)  # cached now
        flaky.down = True
        assert "advisory" not in await t.recall("deploy", deep=True)  # cache hit: no change
        await t.recall("friday", deep=True)
        faulted = await t.recall("ramen", deep=True)
        assert faulted["advisory"]["severity"] == "fault"
        assert faulted["advisory"]["evidence"] == "backend said 503"
        assert "advisory" in await t.recall("deploy", deep=True)  # a cache hit does not heal
        flaky.down = False
        recovered = await t.recall("backups", deep=True)
    assert "advisory" not in recovered
    assert "advisory" not in healthy
    assert recovered["messages"][-1]["match_reason"]["signal"] == "cosine"


async def test_keyless_http_callers_always_get_the_full_fault_runbook(connect, closed_port_url):
    provider = HttpProvider(closed_port_url, timeout=2)
    async with connect(embedding_mode="http", embedder=provider, transport="streamable-http") as t:
        await t.recall("deploy")
        keyless = [(await t.recall("deploy"))["advisory"] for _ in range(2)]
        keyed = [(await t.recall("deploy", session_key="s1"))["advisory"] for _ in range(2)]
    assert all(a["runbook"].startswith("**Notify the user:**") for a in keyless)
    assert all(a["advisory_scope"] == "process" for a in keyless)
    assert keyed[0]["runbook"].startswith("**Notify the user:**")
    assert keyed[1]["runbook"].startswith("Reminder:")
