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
import sys
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cpersona.config import Settings
from cpersona.engine import Engine
from cpersona.server.app import build_server
from mcp import Client

from benches.quality.datasets import Corpus
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


async def load(
    corpus: Corpus, config: Config, provider: Any, directory: Path, *, episodes: bool
) -> dict[str, str]:
    """Store `corpus` under `directory` through the tools; returns {doc key: ref}."""
    if directory.exists():
        shutil.rmtree(directory)
    directory.mkdir(parents=True)
    if len({d.key for d in corpus.docs}) != len(corpus.docs):
        raise ValueError(f"{corpus.name}: document keys are not unique")
    refs: dict[str, str] = {}
    engine = _engine(config.settings(directory / "bench.db"), provider)
    try:
        async with Client(build_server(engine), raise_exceptions=True) as client:
            by_agent: dict[str, int] = defaultdict(int)
            for doc in corpus.docs:
                message: dict[str, Any] = {"id": doc.key, "content": doc.content}
                if doc.timestamp:
                    message["timestamp"] = doc.timestamp
                out = _decode(
                    await client.call_tool("store", {"agent_id": doc.agent, "message": message})
                )
                if out.get("result") not in ("stored", "skipped") or "id" not in out:
                    raise RuntimeError(f"store refused {doc.key}: {out}")
                refs[doc.key] = f"mem:{out['id']}"
                by_agent[doc.agent] += 1
            if episodes:
                for ep in corpus.episodes:
                    history = [{"timestamp": ep.start}, {"timestamp": ep.end}]
                    out = _decode(
                        await client.call_tool(
                            "archive_episode",
                            {"agent_id": ep.agent, "summary": ep.summary, "history": history},
                        )
                    )
                    if not out.get("episode_id"):
                        raise RuntimeError(f"archive_episode refused: {out}")
    finally:
        engine.close()
    return refs


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
                groups[query.group].add(ranked, relevant, len(messages))
    finally:
        engine.close()
        shutil.rmtree(workdir, ignore_errors=True)
    return RunResult(config, dict(groups), time.monotonic() - started)


def note(text: str) -> None:
    print(text, file=sys.stderr, flush=True)
