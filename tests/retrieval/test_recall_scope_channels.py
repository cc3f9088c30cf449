"""Every recall channel, on every backend it has on each store, returns exactly the rows the
scope reference admits (scope_reference.py; issue 31 item 4).

The corpus spreads its rows over two agents, three projects, two channels, sources with and
without the prefix, and instants inside and outside the ranges (a stamp, no stamp, a stamp
that names no instant); every row holds the query's word and is embedded, and the scan limits
keep every scored row, so a channel's answer is its scope filter alone. The channels read rows
through a stand-in for hydration that finds every id (`EveryRow`): hydration re-applies the
scope, and would hide a backend's own filter. Only the remote list is filtered by hydration
itself (the service knows no scope), so it reads through the real one.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from typing import Any

import pytest
from cpersona.engine import Engine
from cpersona.models import ProjectFilter
from cpersona.retrieval.candidates import Candidate, from_episode, from_memory
from cpersona.retrieval.channel import Channel
from cpersona.retrieval.hydration import Ranked
from cpersona.retrieval.recall_query import RecallQuery
from cpersona.retrieval.request import QueryVector
from cpersona.retrieval.scope_reads import ScopeReads
from cpersona.retrieval.text_channels import EpisodeText, Fts5, FullTextFile, Keyword
from cpersona.retrieval.vector_channels import (
    ChunkedScan,
    PgVector,
    RemoteFirst,
    VectorChannel,
    VectorFile,
)
from cpersona.storage.scan_request import ScanLimits, Scope
from cpersona.storage.search import EpisodeHit, MemoryHit
from cpersona.timerange import parse_range
from cpersona.vectors.remote import Hit
from scope_reference import admits, stored_rows
from support.mcp_client import in_memory

pytestmark = pytest.mark.anyio

WORD = "zebra"
SPANS = [None, parse_range("2024-01-01", "2025-01-01"), parse_range("2025-06-01", None)]
SCOPES = [
    Scope(agent, ProjectFilter(project), channel, prefix, span)
    for agent, project, channel, prefix, span in itertools.product(
        ("alice", "bob"), (None, "", "p1"), ("", "c1"), ("", "discord:"), SPANS
    )
]
STAMPS = ["2023-05-01T10:00:00Z", "2024-03-01T10:00:00+09:00", "2025-08-01", "", "someday"]
SOURCES: list[dict[str, str] | None] = [
    {"type": "User", "id": "discord:7"},
    {"type": "User", "id": "slack:7"},
    None,
]


class EveryRow:
    """Hydration's stand-in: every id is a row (of no particular scope)."""

    def expect(self, hits: Iterable[Ranked]) -> None:
        pass

    def memories(self, ids: Sequence[int]) -> dict[int, MemoryHit]:
        return {i: MemoryHit(i, "", WORD, "", "", "", "", "", None) for i in ids}

    def episodes(self, ids: Sequence[int]) -> dict[int, EpisodeHit]:
        return {i: EpisodeHit(i, WORD, None, "", False, "", "", "", None) for i in ids}

    def candidates(self, hits: Sequence[Ranked]) -> list[Candidate]:
        mems, eps = (
            self.memories([i for k, i, _ in hits if k == "mem"]),
            self.episodes([i for k, i, _ in hits if k == "ep"]),
        )
        return [from_memory(mems[i]) if k == "mem" else from_episode(eps[i]) for k, i, _ in hits]


def _vector(scan: Callable[[Engine, str], Any]) -> Callable[[Engine], list[Channel]]:
    return lambda e: [VectorChannel({t: scan(e, t) for t in ("memories", "episodes")})]


def _text(
    backend: Callable[[Engine, str], Any], episodes: bool = True, **settings: Any
) -> Callable[..., Any]:
    """The keyword channel over `backend`, and with `episodes` the episode channel (which has
    nothing to say to a blank query, or without full-text search)."""

    def make(e: Engine) -> list[Channel]:
        s = replace(e.settings, **settings)
        keyword = Keyword(e.db, backend(e, "memories"), s)
        return [EpisodeText(backend(e, "episodes"), s), keyword] if episodes else [keyword]

    return make


#: name -> (the stores it runs on, its channels over an engine, the query's text).
CHANNELS: dict[str, tuple[tuple[str, ...], Callable[[Engine], list[Channel]], str]] = {
    "vector-file": (
        ("sqlite", "postgresql"),
        _vector(lambda e, t: VectorFile(e.indexes[t], e.recaller.kernels, 3)),
        WORD,
    ),
    "pgvector": (("postgresql",), _vector(lambda e, t: PgVector(e.db)), WORD),
    "chunked-scan": (
        ("sqlite",),
        _vector(lambda e, t: ChunkedScan(e.db, e.recaller.kernels, 3)),
        WORD,
    ),
    "full-text-file": (
        ("sqlite", "postgresql"),
        _text(lambda e, t: FullTextFile(e.services.fts[t])),
        WORD,
    ),
    "fts5": (("sqlite",), _text(lambda e, t: Fts5(e.db)), WORD),
    "like": (
        ("sqlite", "postgresql"),
        _text(lambda e, t: Fts5(e.db), False, fts_enabled=False),
        WORD,
    ),
    "recent": (("sqlite", "postgresql"), _text(lambda e, t: Fts5(e.db), False), ""),
    "remote": (("sqlite", "postgresql"), lambda e: [RemoteFirst(VectorChannel({}))], WORD),
}


async def _corpus(engine: Engine) -> None:
    async with in_memory(engine) as t:
        for i in range(36):
            message: dict[str, Any] = {"content": f"{WORD} note {i}"}
            if STAMPS[i % 5]:
                message["timestamp"] = STAMPS[i % 5]
            if SOURCES[i % 3] is not None:
                message["source"] = SOURCES[i % 3]
            extra = {
                "project_id": ["", "p1", "p2"][i % 3 if i % 4 else 0],
                "channel": ["", "c1", "c2"][i % 3],
            }
            agent = "bob" if i % 7 == 6 else "alice"
            await t.store(
                message.pop("content"), agent, **message, **{k: v for k, v in extra.items() if v}
            )
        for i in range(9):
            history = [{"timestamp": STAMPS[i % 5], "content": "x"}] if STAMPS[i % 5] else []
            await t(
                "archive_episode",
                {
                    "agent_id": "bob" if i == 8 else "alice",
                    "summary": f"{WORD} episode {i}",
                    "project_id": ["", "p1", "p2"][i % 3],
                    "channel": ["", "c1", "c2"][(i // 3) % 3],
                    "history": history,
                },
            )


def _query(engine: Engine, scope: Scope, text: str) -> RecallQuery:
    vector, _ = engine.embedder.embed_one(WORD, "query")
    every = frozenset({"memories", "episodes"})
    return RecallQuery(
        scope=scope,
        text=text,
        terms=(WORD,) if text else (),
        mode="rrf",
        limit=1000,
        deep=True,
        exclusions=(),
        scan=ScanLimits(window=10_000, reach=0, threshold=-2.0, k=1000, far_k=1000),
        vector=QueryVector(vector, every),
    )


@pytest.mark.parametrize("name", sorted(CHANNELS))
async def test_each_channel_returns_the_rows_its_scope_admits(
    name: str, make_engine: Callable[..., Engine], store_backend: str, kernel: str
) -> None:
    stores, make, text = CHANNELS[name]
    engine = make_engine()
    if store_backend not in stores or (name == "full-text-file" and not engine.services.fts):
        pytest.skip(f"{name} is no backend of {store_backend} with the {kernel} kernel")
    await _corpus(engine)
    rows = stored_rows(engine.db)
    assert {r.kind for r in rows} == {"mem", "ep"}
    channels = make(engine)
    answered = 0
    for scope in SCOPES:
        if name == "remote" and scope.span is not None:
            continue  # a time-scoped recall never asks the remote service (pipeline.py)
        query = _query(engine, scope, text)
        if name == "remote":
            hits = tuple(Hit(r.kind, r.id, 0.5) for r in rows)
            query = replace(query, remote=hits)
        reads = ScopeReads(engine.db, scope, None).rows
        stand_in = reads if name == "remote" else EveryRow()
        got: set[tuple[str, int]] = set()
        kinds: set[str] = set()
        with engine.db.snapshot():
            for channel in channels:
                for lst in channel.rank(query, stand_in):  # type: ignore[arg-type]
                    lst.hydrated(stand_in)  # type: ignore[arg-type]
                    got |= {(r.kind, r.id) for r in lst.rows}
                    kinds |= {"mem", "ep"} if lst.name in ("near", "far") else set()
                kinds |= {"ep"} if isinstance(channel, EpisodeText) else set()
                kinds |= {"mem"} if isinstance(channel, Keyword) else set()
        want = {(r.kind, r.id) for r in rows if r.kind in kinds and admits(scope, r)}
        assert got == want, scope
        answered += bool(want)
    assert answered >= 10  # the scopes are not all empty
