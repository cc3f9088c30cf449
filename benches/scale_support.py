"""Databases of one agent's embedded memories at scale, cached on disk, for the scale benchmarks.

A corpus is a real cpersona database (the schema `open_database` creates, FTS and the vector
log triggers included) filled by bulk SQL: `rows` memories of agent `bench`, each a short unique
text over a fixed vocabulary and a unit float32 vector of width `dim`, `created_at` one row every
90 seconds from 2024-01-01 (so they are all older than anything stored today), inserted in one
transaction; then `VectorIndex.rebuild()` writes both index files. Everything derives from a
fixed seed, so a corpus is the same on every machine.

Full-size corpora (10,000 / 100,000 / 237,654 rows at 384 and 768 dims) are built only when the
run asks for numbers (``--benchmark-enable``) and are cached under
``$CPERSONA_BENCH_CACHE/scale`` (default ``~/.cache/cpersona-bench/scale``), keyed by size, width
and `CORPUS_VERSION`; a partly built corpus has no ``.json`` stamp and is rebuilt. Any other run
(CI's ``--benchmark-disable``) uses one 1,200-row corpus in a temporary directory, with the
window and reach scaled down so that the far region is still exercised.

``CPERSONA_BENCH_SCALE_ROWS=10000,237654`` picks the sizes of a full run.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from cpersona.models import ProjectFilter
from cpersona.storage import embeddings as vector_sql
from cpersona.storage import open_database
from cpersona.vectors.index import VectorIndex
from cpersona.vectors.search import Scope

#: Bump when the generator changes: cached corpora of another version are not reused.
CORPUS_VERSION = 1
AGENT = "bench"
SCOPE = Scope(AGENT, ProjectFilter(None))
FULL_SIZES = (10_000, 100_000, 237_654)
DIMS = (384, 768)
BASE_TIME = datetime(2024, 1, 1, tzinfo=UTC)
STEP_SECONDS = 90
SEED = 20_240_101
#: The text both the FTS arm and the lexical arm of the end-to-end recall search for.
QUERY_TEXT = "quarterly harbor maintenance schedule"


@dataclass(frozen=True)
class Workload:
    """The spec's window and reach (retrieval.md §4.2-4.3), scaled down for smoke runs."""

    window: int
    reach: int
    k: int = 10


FULL = Workload(window=10_000, reach=200_000)
SMOKE = Workload(window=500, reach=1_000)
SMOKE_ROWS = 1_200


def full_run(config: pytest.Config) -> bool:
    """Whether this run measures (``--benchmark-enable``) rather than smoke-tests."""
    return bool(config.getoption("benchmark_enable"))


def sizes(config: pytest.Config) -> tuple[int, ...]:
    if not full_run(config):
        return (SMOKE_ROWS,)
    env = os.environ.get("CPERSONA_BENCH_SCALE_ROWS", "").strip()
    return tuple(int(v) for v in env.split(",") if v.strip()) if env else FULL_SIZES


def workload(config: pytest.Config) -> Workload:
    return FULL if full_run(config) else SMOKE


def cache_dir() -> Path:
    env = os.environ.get("CPERSONA_BENCH_CACHE")
    base = Path(env) if env else Path.home() / ".cache" / "cpersona-bench"
    return base / "scale"


# -- the corpus -----------------------------------------------------------------------------


def _vocabulary(n: int = 2_000) -> list[str]:
    """Deterministic pronounceable words (so FTS trigrams behave like text, not like hex)."""
    consonants, vowels = "bcdfghklmnprstvz", "aeiou"
    words: list[str] = []
    i = 0
    while len(words) < n:
        h = hashlib.blake2b(f"w{i}".encode(), digest_size=8).digest()
        words.append("".join(consonants[h[j] % 16] + vowels[h[j + 4] % 5] for j in range(3)))
        i += 1
    return sorted(set(words))[:n] + QUERY_TEXT.split()


def _contents(start: int, count: int, rng: np.random.Generator, vocab: list[str]) -> list[str]:
    picks = rng.integers(0, len(vocab), size=(count, 10))
    return [f"note {start + i}: " + " ".join(vocab[j] for j in row) for i, row in enumerate(picks)]


def _unit(rng: np.random.Generator, count: int, dim: int) -> np.ndarray:
    v = rng.standard_normal((count, dim), dtype=np.float32)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    return v


def _stamp(i: int) -> str:
    return (BASE_TIME + timedelta(seconds=STEP_SECONDS * i)).strftime("%Y-%m-%d %H:%M:%S")


@dataclass(frozen=True)
class Corpus:
    db_path: Path
    rows: int
    dim: int
    info: dict[str, Any]

    @property
    def index_path(self) -> Path:
        return Path(f"{self.db_path}.memories.vec")

    def files(self) -> list[Path]:
        return [self.db_path, self.index_path, Path(f"{self.db_path}.episodes.vec")]

    def query(self) -> np.ndarray:
        """Unit query near one window row and one far-region row (ids from the oldest end)."""
        window_row = self.rows - max(1, min(self.rows, 10_000) // 3)  # inside the window
        far_row = max(1, self.rows // 5)  # inside the far region when rows > window
        with sqlite3.connect(f"file:{self.db_path}?mode=ro", uri=True) as conn:
            blobs = dict(
                conn.execute(
                    "SELECT id, embedding FROM memories WHERE id IN (?, ?)", (window_row, far_row)
                ).fetchall()
            )
        a = np.frombuffer(blobs[window_row], "<f4")
        b = np.frombuffer(blobs[far_row], "<f4")
        q = a + 0.8 * b
        return (q / np.linalg.norm(q)).astype(np.float32)

    def copy_to(self, directory: Path) -> Corpus:
        """A private copy (database and index files) for benchmarks that write."""
        directory.mkdir(parents=True, exist_ok=True)
        for src in self.files():
            if src.exists():
                target = directory / src.name
                shutil.copyfile(src, target)
                # Written back now: otherwise the first commits of a write benchmark pay for
                # the copy's gigabyte of dirty pages (ext4 flushes them with the journal).
                fd = os.open(target, os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
        return Corpus(directory / self.db_path.name, self.rows, self.dim, self.info)


def build(db_path: Path, rows: int, dim: int) -> dict[str, Any]:
    """Write the corpus at `db_path` (see the module docstring); returns what it measured."""
    for stale in (db_path, *(db_path.parent.glob(db_path.name + "*"))):
        stale.unlink(missing_ok=True)
    db = open_database(str(db_path))  # schema, triggers, db_uid
    db.close()
    rng = np.random.default_rng([SEED, rows, dim])
    vocab = _vocabulary()
    started = time.perf_counter()
    conn = sqlite3.connect(db_path, isolation_level=None)
    conn.execute("PRAGMA synchronous=OFF")
    conn.execute("BEGIN")
    for start in range(0, rows, 10_000):
        count = min(10_000, rows - start)
        vectors = _unit(rng, count, dim)
        texts = _contents(start, count, rng, vocab)
        conn.executemany(
            "INSERT INTO memories (agent_id, content, timestamp, embedding, created_at) "
            "VALUES (?, ?, ?, ?, ?)",
            (
                (AGENT, texts[i], _stamp(start + i).replace(" ", "T") + "+00:00",
                 vectors[i].tobytes(), _stamp(start + i))
                for i in range(count)
            ),
        )  # fmt: skip
    conn.execute("COMMIT")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    inserted = time.perf_counter() - started
    db = open_database(str(db_path))
    try:
        started = time.perf_counter()
        indexed = VectorIndex(db, "memories").rebuild()
        rebuild_s = time.perf_counter() - started
        VectorIndex(db, "episodes").rebuild()
        # The bulk insert logged every row; the rebuild applied them all, so trim as a server
        # would after its first sync (a write benchmark then sees the steady-state log).
        vector_sql.trim_log(db, "memories", vector_sql.max_seq(db))
    finally:
        db.close()
    assert indexed == rows, (indexed, rows)
    return {
        "rows": rows,
        "dim": dim,
        "version": CORPUS_VERSION,
        "insert_s": round(inserted, 1),
        "rebuild_s": round(rebuild_s, 1),
        "db_bytes": db_path.stat().st_size,
        "index_bytes": Path(f"{db_path}.memories.vec").stat().st_size,
    }


def corpus(rows: int, dim: int, tmp_dir: Path | None = None) -> Corpus:
    """The cached corpus of `rows` x `dim` (built on first use), or one built in `tmp_dir`."""
    if tmp_dir is not None:
        path = tmp_dir / f"mem-{rows}x{dim}.db"
        return Corpus(path, rows, dim, build(path, rows, dim))
    directory = cache_dir()
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"mem-{rows}x{dim}-v{CORPUS_VERSION}.db"
    stamp = path.with_name(path.name + ".json")
    if stamp.exists() and all(p.exists() for p in (path, Path(f"{path}.memories.vec"))):
        return Corpus(path, rows, dim, json.loads(stamp.read_text()))
    stamp.unlink(missing_ok=True)
    info = build(path, rows, dim)
    stamp.write_text(json.dumps(info, indent=1))
    return Corpus(path, rows, dim, info)


def parametrize_spec(metafunc: pytest.Metafunc) -> None:
    """A bench module's `pytest_generate_tests`: `spec` is (rows, dim) for every size of the run
    and every width, module-scoped so each corpus is opened once."""
    if "spec" in metafunc.fixturenames:
        specs = [(n, d) for n in sizes(metafunc.config) for d in DIMS]
        metafunc.parametrize("spec", specs, ids=[f"{n}x{d}" for n, d in specs], scope="module")


def corpus_for(
    spec: tuple[int, int], config: pytest.Config, tmp_path_factory: pytest.TempPathFactory
) -> Corpus:
    """The corpus of `spec`: the cached full-size one on a full run, else one in a temporary
    directory."""
    rows, dim = spec
    if full_run(config):
        return corpus(rows, dim)
    return corpus(rows, dim, tmp_path_factory.mktemp("corpus"))


# -- a provider whose vectors are fixed ------------------------------------------------------


class FixedQueryProvider:
    """Embeds every query as one fixed vector and every passage as a seeded unit vector.

    Stands in for the model in end-to-end benchmarks: recall then costs what cpersona costs, not
    what a model costs, at any width.
    """

    available = True

    def __init__(self, query: np.ndarray) -> None:
        self._query = np.ascontiguousarray(query, dtype=np.float32)
        self.name = f"fixed:{self._query.shape[0]}"

    def dim(self) -> int:
        return int(self._query.shape[0])

    def embed(self, texts: Any, *, kind: str = "passage") -> np.ndarray:
        texts = list(texts)
        if kind == "query":
            return np.tile(self._query, (len(texts), 1))
        out = np.empty((len(texts), self.dim()), dtype=np.float32)
        for i, text in enumerate(texts):
            seed = int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")
            out[i] = _unit(np.random.default_rng(seed), 1, self.dim())[0]
        return out

    def close(self) -> None:
        pass


# -- process memory --------------------------------------------------------------------------


def proc_status(pid: int) -> dict[str, int]:
    """VmRSS, VmHWM, RssAnon, RssFile, RssShmem of a process in kB, and its Threads (from
    /proc/<pid>/status)."""
    out: dict[str, int] = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM", "RssAnon", "RssFile", "RssShmem", "Threads"):
                out[key] = int(value.split()[0])
    return out


def machine_state() -> dict[str, Any]:
    """Load average and free memory when a benchmark ran (the machine is shared)."""
    load1, load5, _ = os.getloadavg()
    info: dict[str, Any] = {"load1": round(load1, 2), "load5": round(load5, 2)}
    with open("/proc/meminfo") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key == "MemAvailable":
                info["mem_available_gb"] = round(int(value.split()[0]) / 2**20, 1)
    return info
