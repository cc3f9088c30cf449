"""The 1,000,000-memory corpus of the scale benchmark (issue 20), and its 10,000 / 100,000 peers.

Texts follow English word frequencies, as the natural-vocabulary workload of the full-text
benchmarks does (benches/fts_bench_support.py): each memory is 8-20 words drawn with Zipf
weights (1 / rank) from a vocabulary whose head is that workload's 140 common English words
and whose tail is 20,000 generated pronounceable words (ranks 141-20,140). The head then
carries about half of all word occurrences, as in English text; the tail makes most words of
a query rare, and new to a server that has not seen them before (what the issue measured).
Vectors are 384-d, the hashing embedder's (`embedding/hashing.py`, the server's
`CPERSONA_EMBEDDING_MODE=hashing`): a text's vector is the normalised sum of its words' feature
vectors, which is what `HashingProvider.embed` computes, summed here per vocabulary word once
so that a million texts embed in seconds (`check_vectors` compares a sample with the
provider).

The database is a real cpersona database (`open_database`: schema, FTS5 and vector-log
triggers), filled by bulk SQL, one transaction per batch of 20,000 rows; `created_at` one row
every 90 seconds from 2024-01-01 (all older than today). Then the vector and full-text index
files of both tables are built, timed (the "index build time"), and the vector log is trimmed
as a server would after its first sync.

Cached under ``$CPERSONA_BENCH_CACHE/million`` (default ``~/.cache/cpersona-bench/million``),
keyed by size and `CORPUS_VERSION`; a corpus without its ``.json`` stamp was not finished and is
rebuilt. Everything derives from fixed seeds: the same corpus on every machine.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import sqlite3
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
from cpersona import _backend
from cpersona.embedding.hashing import HashingProvider, _features, _slot
from cpersona.fts.index import FtsIndex
from cpersona.storage import embeddings as vector_sql
from cpersona.storage import open_database
from cpersona.vectors.index import VectorIndex

from benches.fts_bench_support import COMMON
from benches.scale_support import _stamp  # the scale corpora's row times, 90 s apart

#: Bump when the generator changes: cached corpora of another version are not reused.
CORPUS_VERSION = 1
AGENT = "bench"
DIM = 384
TAIL_WORDS = 20_000
BATCH = 20_000
SIZES = (10_000, 100_000, 1_000_000)
INDEX_SUFFIXES = (".memories.vec", ".episodes.vec", ".memories.fts", ".episodes.fts")


def cache_dir() -> Path:
    env = os.environ.get("CPERSONA_BENCH_CACHE")
    base = Path(env) if env else Path.home() / ".cache" / "cpersona-bench"
    return base / "million"


def vocabulary() -> list[str]:
    """The 140 common English words by rank, then TAIL_WORDS generated ones."""
    consonants, vowels = "bcdfghklmnprstvz", "aeiou"
    seen = set(COMMON)
    words = list(COMMON)
    i = 0
    while len(words) < len(COMMON) + TAIL_WORDS:
        h = hashlib.blake2b(f"tail{i}".encode(), digest_size=8).digest()
        syllables = 2 + h[7] % 3
        word = "".join(consonants[h[j] % 16] + vowels[h[j + 3] % 5] for j in range(syllables))
        if word not in seen:
            seen.add(word)
            words.append(word)
        i += 1
    return words


def cum_weights(n: int) -> list[float]:
    total, out = 0.0, []
    for rank in range(n):
        total += 1.0 / (rank + 1)
        out.append(total)
    return out


class Vocabulary:
    """The words, their Zipf sampler and each word's hashing-embedder feature vector."""

    def __init__(self) -> None:
        self.words = vocabulary()
        self.cum = cum_weights(len(self.words))
        self.index = {w: i for i, w in enumerate(self.words)}
        vectors = np.zeros((len(self.words), DIM), dtype=np.float64)
        for i, word in enumerate(self.words):
            for feature, weight in _features(word):
                slot, sign = _slot(feature, DIM)
                vectors[i, slot] += sign * weight
        self.vectors = vectors

    def sentence(self, rng: random.Random, low: int = 8, high: int = 20) -> list[int]:
        n = rng.randint(low, high)
        return [self.index[w] for w in rng.choices(self.words, cum_weights=self.cum, k=n)]

    def embed(self, sentences: list[list[int]]) -> np.ndarray:
        """Unit float32 vectors of the sentences, as HashingProvider computes them."""
        parts = []
        for at in range(0, len(sentences), 256):  # 256 sentences: a gather of ~3,600 rows
            chunk = sentences[at : at + 256]
            flat = np.fromiter((w for s in chunk for w in s), dtype=np.int64)
            starts = np.cumsum([0] + [len(s) for s in chunk[:-1]])
            # Every sentence has 8 or more words, so no segment of reduceat is empty.
            parts.append(np.add.reduceat(self.vectors[flat], starts, axis=0))
        out = np.concatenate(parts)
        out /= np.linalg.norm(out, axis=1, keepdims=True)
        return out.astype("<f4")

    def text(self, sentence: list[int]) -> str:
        return " ".join(self.words[w] for w in sentence)


def check_vectors(vocab: Vocabulary, samples: int = 50) -> float:
    """The largest difference between this module's vectors and HashingProvider's."""
    rng = random.Random(99)
    sentences = [vocab.sentence(rng) for _ in range(samples)]
    ours = vocab.embed(sentences)
    theirs = HashingProvider(DIM).embed([vocab.text(s) for s in sentences])
    return float(np.max(np.abs(ours - theirs)))


@dataclass(frozen=True)
class Corpus:
    db_path: Path
    rows: int
    info: dict[str, Any]

    def files(self) -> list[Path]:
        return [self.db_path, *(Path(f"{self.db_path}{s}") for s in INDEX_SUFFIXES)]


def _insert(db_path: Path, rows: int, vocab: Vocabulary, log: Any) -> float:
    rng = random.Random(rows)
    started = time.perf_counter()
    conn = sqlite3.connect(db_path, isolation_level=None)
    conn.execute("PRAGMA synchronous=OFF")
    conn.execute("PRAGMA cache_size=-262144")  # 256 MB: the FTS5 segments merge in memory
    try:
        for start in range(0, rows, BATCH):
            count = min(BATCH, rows - start)
            sentences = [vocab.sentence(rng) for _ in range(count)]
            vectors = vocab.embed(sentences)
            conn.execute("BEGIN")
            conn.executemany(
                "INSERT INTO memories (agent_id, content, timestamp, embedding, created_at) "
                "VALUES (?, ?, ?, ?, ?)",
                (
                    (AGENT, vocab.text(s), _stamp(start + i).replace(" ", "T") + "+00:00",
                     vectors[i].tobytes(), _stamp(start + i))
                    for i, s in enumerate(sentences)
                ),
            )  # fmt: skip
            conn.execute("COMMIT")
            if start // BATCH % 10 == 0:
                log(f"  {start + count:,} rows, {time.perf_counter() - started:.0f} s")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()
    return time.perf_counter() - started


def build(db_path: Path, rows: int, log: Any = print) -> dict[str, Any]:
    """Write the corpus at `db_path`; returns what the build measured."""
    for stale in (db_path, *(db_path.parent.glob(db_path.name + "*"))):
        stale.unlink(missing_ok=True)
    open_database(str(db_path)).close()  # schema, triggers, db_uid
    vocab = Vocabulary()
    inserted = _insert(db_path, rows, vocab, log)
    log(f"  inserted in {inserted:.0f} s; building the index files")
    kernels = _backend.from_environment()
    db = open_database(str(db_path))
    timings: dict[str, float] = {}
    try:
        for table in ("memories", "episodes"):
            t0 = time.perf_counter()
            VectorIndex(db, table).rebuild()
            t1 = time.perf_counter()
            FtsIndex(db, table, kernels.FtsIndex).rebuild()
            t2 = time.perf_counter()
            timings[f"{table}_vec_s"] = round(t1 - t0, 1)
            timings[f"{table}_fts_s"] = round(t2 - t1, 1)
        vector_sql.trim_log(db, "memories", vector_sql.max_seq(db))
    finally:
        db.close()
    conn = sqlite3.connect(db_path)  # no WAL beside the cached file: a copy is the whole state
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    return {
        "rows": rows,
        "dim": DIM,
        "version": CORPUS_VERSION,
        "insert_s": round(inserted, 1),
        **timings,
        "db_bytes": db_path.stat().st_size,
        "vec_bytes": Path(f"{db_path}.memories.vec").stat().st_size,
        "fts_bytes": Path(f"{db_path}.memories.fts").stat().st_size,
        "built_at": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
    }


def corpus(rows: int, log: Any = print) -> Corpus:
    """The cached corpus of `rows` memories, built on first use."""
    directory = cache_dir()
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"natural-{rows}x{DIM}-v{CORPUS_VERSION}.db"
    stamp = path.with_name(path.name + ".json")
    found = Corpus(path, rows, {})
    if stamp.exists() and all(p.exists() for p in found.files()):
        return Corpus(path, rows, json.loads(stamp.read_text()))
    stamp.unlink(missing_ok=True)
    log(f"building {path} ({rows:,} rows)")
    info = build(path, rows, log)
    stamp.write_text(json.dumps(info, indent=1))
    return Corpus(path, rows, info)


def queries(count: int, seed: int = 7) -> list[str]:
    """`count` distinct queries of 6-8 words drawn with the corpus's Zipf weights."""
    vocab_words = vocabulary()
    cum = cum_weights(len(vocab_words))
    rng = random.Random(seed)
    seen: set[str] = set()
    out: list[str] = []
    while len(out) < count:
        words = rng.choices(vocab_words, cum_weights=cum, k=rng.randint(6, 8))
        q = " ".join(words)
        if q not in seen:
            seen.add(q)
            out.append(q)
    return out
