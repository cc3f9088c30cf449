"""Load a corpus through cpersona's own tools and judge every `recall` answer.

Everything goes through the MCP surface, in memory (`mcp.Client` over `build_server`): memories
are written with `store` (and sessions, optionally, with `archive_episode`), questions are
asked with `recall`. A corpus is loaded once per embedder into a template directory; each
configuration then runs on its own copy, so confidence's recall-count writes never leak from
one configuration into the next.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import sqlite3
import sys
import time
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from cpersona.config import Settings
from cpersona.engine import Engine
from cpersona.server.app import build_server
from mcp import Client

from benches.quality.datasets import Corpus, Doc, Episode
from benches.quality.metrics import Tally


@dataclass(frozen=True, slots=True)
class Config:
    """One way of running recall: which embedder, which fusion, FTS, confidence."""

    embedder: str  # none | local-minilm | local-e5
    mode: str = "rrf"  # rrf | rsf
    fts: bool = True  # False with an embedder: the vector arm alone
    confidence: bool = False

    @property
    def label(self) -> str:
        name = self.embedder.removeprefix("local-")
        if self.embedder == "none":
            arm = f"fts {self.mode}"
        elif not self.fts:
            arm = "alone"
        else:
            arm = self.mode
        return f"{name} {arm}" + (" +conf" if self.confidence else "")

    def settings(self, db_path: Path) -> Settings:
        return dataclasses.replace(
            Settings(),
            db_path=str(db_path),
            embedding_mode=self.embedder,
            recall_mode=self.mode,
            fts_enabled=self.fts,
            confidence_enabled=self.confidence,
            degraded_advisory=False,
        )


def matrix(embedders: list[str]) -> list[Config]:
    """FTS only; then, per embedder, alone and in hybrid under rrf and rsf; confidence off/on."""
    out = [Config("none", "rrf"), Config("none", "rrf", confidence=True)]
    for name in embedders:
        for fts, mode in ((False, "rrf"), (True, "rrf"), (True, "rsf")):
            for confidence in (False, True):
                out.append(Config(name, mode, fts, confidence))
    return out


def _decode(result: Any) -> dict[str, Any]:
    if result.is_error:
        raise RuntimeError(result.content[0].text)
    payload: dict[str, Any] = json.loads(result.content[0].text)
    if "error" in payload and "messages" not in payload and "result" not in payload:
        raise RuntimeError(payload["error"])
    return payload


def _engine(settings: Settings, provider: Any) -> Engine:
    return Engine(settings, embedder=provider) if provider is not None else Engine(settings)


#: How a corpus is written: its memories only; every session archived as an episode after all
#: memories (on today's clock); or replayed as lived, each session's memories stored on its
#: own date and the session archived as an episode when it ends (every row's `created_at` what
#: the server's clock would have written then).
REPLAYS = ("turns", "end", "lived")


async def _archive(client: Client, ep: Episode) -> int:
    history = [{"timestamp": ep.start}, {"timestamp": ep.end}]
    out = _decode(
        await client.call_tool(
            "archive_episode", {"agent_id": ep.agent, "summary": ep.summary, "history": history}
        )
    )
    if not out.get("episode_id"):
        raise RuntimeError(f"archive_episode refused: {out}")
    return int(out["episode_id"])


def _sessions(corpus: Corpus) -> list[tuple[list[Doc], Episode | None]]:
    """The corpus's memories grouped by (agent, session) in stored order, each with the
    episode that archives it (None: a session without a summary, or memories with no session)."""
    episodes = {(e.agent, e.session): e for e in corpus.episodes if e.session}
    groups: dict[tuple[str, str], list[Doc]] = {}
    for doc in corpus.docs:
        groups.setdefault((doc.agent, doc.session), []).append(doc)
    return [(docs, episodes.get(key) if key[1] else None) for key, docs in groups.items()]


def _parse(stamp: str) -> datetime:
    return datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ")


def _iso(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


async def load(
    corpus: Corpus,
    config: Config,
    provider: Any,
    directory: Path,
    *,
    episodes: bool = False,
    replay: str = "",
) -> dict[str, str]:
    """Store `corpus` under `directory` through the tools; returns {doc key: ref}.

    `replay` is one of REPLAYS ("end" when only `episodes` is set).
    """
    replay = replay or ("end" if episodes else "turns")
    if replay not in REPLAYS:
        raise ValueError(f"replay must be one of {REPLAYS}, not {replay!r}")
    if directory.exists():
        shutil.rmtree(directory)
    directory.mkdir(parents=True)
    if len({d.key for d in corpus.docs}) != len(corpus.docs):
        raise ValueError(f"{corpus.name}: document keys are not unique")
    refs: dict[str, str] = {}
    written: dict[str, dict[int, datetime]] = {"memories": {}, "episodes": {}}
    engine = _engine(config.settings(directory / "bench.db"), provider)
    try:
        async with Client(build_server(engine), raise_exceptions=True) as client:

            async def store(doc: Doc, timestamp: str | None) -> None:
                message: dict[str, Any] = {"id": doc.key, "content": doc.content}
                if timestamp:
                    message["timestamp"] = timestamp
                out = _decode(
                    await client.call_tool("store", {"agent_id": doc.agent, "message": message})
                )
                if out.get("result") not in ("stored", "skipped") or "id" not in out:
                    raise RuntimeError(f"store refused {doc.key}: {out}")
                refs[doc.key] = f"mem:{out['id']}"

            if replay != "lived":
                for doc in corpus.docs:
                    await store(doc, doc.timestamp)
                if replay == "end":
                    for ep in corpus.episodes:
                        await _archive(client, ep)
            else:
                for docs, ep in _sessions(corpus):
                    # A memory without a date of its own takes its session's (JSQuAD).
                    start = _parse(ep.start) if ep is not None else None
                    for i, doc in enumerate(docs):
                        stamp = doc.timestamp
                        if stamp is None and start is not None:
                            stamp = _iso(start + timedelta(seconds=30 * i))
                        await store(doc, stamp)
                        if stamp is not None:
                            written["memories"][int(refs[doc.key][4:])] = _parse(stamp)
                    if ep is not None:
                        episode_id = await _archive(client, ep)
                        written["episodes"][episode_id] = _parse(ep.end) + timedelta(minutes=1)
    finally:
        engine.close()
    if replay == "lived":
        _as_written_then(directory / "bench.db", written)
    return refs


def _as_written_then(db_path: Path, written: dict[str, dict[int, datetime]]) -> None:
    """Give every row the `created_at` the server's clock would have written when the row was
    stored as lived (SQLite's `datetime('now')` format), then drop the derived index files so
    the next open rebuilds them from the database.

    Why not libfaketime: the whole in-process server under it ran 8-10x slower (timed waits
    measured against a faked wall clock), which made the full replay take an hour.
    """
    with sqlite3.connect(db_path) as conn:
        for table, rows in written.items():
            conn.executemany(
                f"UPDATE {table} SET created_at = ? WHERE id = ?",
                [(m.strftime("%Y-%m-%d %H:%M:%S"), i) for i, m in rows.items()],
            )
    keep = {db_path.name, f"{db_path.name}-wal", f"{db_path.name}-shm"}
    for path in db_path.parent.iterdir():
        if path.name.startswith(db_path.name) and path.name not in keep:
            if path.is_dir():
                shutil.rmtree(path)
            else:
                path.unlink()


@dataclass
class RunResult:
    config: Config
    groups: dict[str, Tally]
    seconds: float


async def run(
    corpus: Corpus,
    config: Config,
    provider: Any,
    template: Path,
    refs: dict[str, str],
    workdir: Path,
    *,
    calibrate: bool = False,
) -> RunResult:
    """Ask every question of `corpus` through `recall` on a copy of the loaded `template`.

    With `calibrate`, each agent is first calibrated with `calibrate_threshold` (vector
    threshold and fused gate, as a restarted server does in the background, §15.2).
    """
    if workdir.exists():
        shutil.rmtree(workdir)
    shutil.copytree(template, workdir)
    engine = _engine(config.settings(workdir / "bench.db"), provider)
    groups: dict[str, Tally] = defaultdict(Tally)
    started = time.monotonic()
    try:
        async with Client(build_server(engine), raise_exceptions=True) as client:
            if calibrate and config.embedder != "none":
                for agent in dict.fromkeys(d.agent for d in corpus.docs):
                    out = _decode(
                        await client.call_tool("calibrate_threshold", {"agent_id": agent})
                    )
                    if not out.get("ok"):
                        raise RuntimeError(f"calibrate_threshold failed: {out}")
            for query in corpus.queries:
                out = _decode(
                    await client.call_tool(
                        "recall", {"agent_id": query.agent, "query": query.text, "limit": 10}
                    )
                )
                messages = out["messages"]
                # recall answers worst first: the best match is the LAST message.
                ranked = [m["ref"] for m in reversed(messages) if "ref" in m]
                relevant = frozenset(refs[k] for k in query.relevant)
                cosines = [
                    m["match_reason"]["cosine"]
                    for m in messages
                    if "cosine" in m.get("match_reason", {})
                ]
                best = max(cosines) if cosines else None
                groups[query.group].add(ranked, relevant, len(messages), best)
    finally:
        engine.close()
        shutil.rmtree(workdir, ignore_errors=True)
    return RunResult(config, dict(groups), time.monotonic() - started)


def note(text: str) -> None:
    print(text, file=sys.stderr, flush=True)
