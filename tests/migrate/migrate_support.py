"""Generated databases for `cpersona migrate` tests and benches, and ways to read them back.

`generate` fills a cpersona SQLite database by bulk SQL with every copied table populated and
the awkward cases a real database collects: NULL embeddings, blobs that are not float32 vectors
(odd length, empty, NaN), deleted rows (the last id among them, so the identity's high-water
mark is above MAX(id)), locked rows, msg_ids, both project and channel axes, non-ASCII text, a
model record and a conversion in progress with staged vectors. Deterministic for a seed.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path

import numpy as np
from cpersona.config import Settings
from cpersona.embedding.hashing import HashingProvider
from cpersona.engine import Engine
from cpersona.server.app import build_server
from cpersona.storage import open_database
from mcp import Client

WORDS = [
    *[
        "harbor",
        "tea",
        "garden",
        "Kyoto",
        "lemon",
        "schedule",
        "river",
        "station",
        "report",
        "budget",
        "window",
    ],
    *["maple", "quiet", "engine", "ledger", "orbit", "cedar", "lantern", "東京", "地図", "会議"],
]
AGENTS = ("alice", "bob", "carol")
#: Every table `cpersona migrate` copies, with its key, for reading a database back.
TABLES = {
    "memories": "id",
    "episodes": "id",
    "profiles": "id",
    "pending_memory_tasks": "id",
    "cpersona_vector_model": "tbl",
    "cpersona_reembed": "tbl",
    "cpersona_reembed_vectors": "tbl, row_id",
    "cpersona_subject_aliases": "issuer, subject",
    "entities": "id",
    "entity_aliases": "entity_id, normalized",
    "entity_mentions": "entity_id, ref",
    "relations": "id",
}


def _text(rng: np.random.Generator, i: int) -> str:
    words = " ".join(WORDS[j] for j in rng.integers(0, len(WORDS), 6))
    return f"note {i}: {words}"


def generate(path: Path, rows: int, *, seed: int = 1, odd_blobs: bool = True) -> None:
    """A database of `rows` memories (and rows // 10 episodes, profiles, tasks) at `path`.

    Embeddings come from the 384-d hashing embedder (so recall finds what it should), except
    that `odd_blobs` plants blobs that are not vectors.
    """
    rng = np.random.default_rng(seed)
    embedder = HashingProvider()
    open_database(str(path)).close()
    texts = [_text(rng, i) for i in range(rows)]
    vectors = embedder.embed(texts) if rows else np.empty((0, 384), np.float32)
    mem = []
    for i, text in enumerate(texts):
        blob: bytes | None = vectors[i].tobytes()
        if i % 97 == 13:
            blob = None
        agent = AGENTS[i % 3]
        mem.append(
            (
                i + 1,
                agent,
                "proj-x" if i % 4 == 0 else "",
                f"m-{i}" if i % 3 == 0 else "",
                text,
                '{"via": "gen"}',
                f"2025-01-{1 + i % 28:02d}T10:00:00+09:00",
                f'{{"n": {i}}}',
                blob,
                "discord:general" if i % 5 == 0 else "",
                int(rng.integers(0, 4)),
                "2025-02-01 00:00:00" if i % 7 == 0 else None,
                1 if i % 50 == 0 else 0,
                f"2025-01-01 00:{(i // 60) % 60:02d}:{i % 60:02d}.{i:06d}",
            )
        )
    if odd_blobs and rows >= 4:
        nan = np.full(384, np.nan, dtype=np.float32).tobytes()
        for at, blob in ((1, b"\x01\x02\x03\x04\x05"), (2, b""), (3, nan)):
            mem[at] = (*mem[at][:8], blob, *mem[at][9:])
    episodes = []
    for j in range(rows // 10):
        summary = f"episode {j}: " + texts[j * 10][8:]
        blob = embedder.embed([summary])[0].tobytes() if j % 11 else None
        episodes.append(
            (j + 1, AGENTS[j % 3], "", summary, "tea,harbor", blob,
             "2025-01-01T00:00:00Z", "2025-01-01T01:00:00Z", j % 2, "",
             f"2025-01-02 00:00:{j % 60:02d}.{j:06d}")
        )  # fmt: skip
    with closing(sqlite3.connect(path)) as conn, conn:
        conn.executemany(f"INSERT INTO memories VALUES ({', '.join('?' * 14)})", mem)
        conn.executemany(f"INSERT INTO episodes VALUES ({', '.join('?' * 11)})", episodes)
        conn.executemany(
            "INSERT INTO profiles(agent_id, project_id, user_id, content, updated_at) "
            "VALUES (?, ?, ?, ?, ?)",
            [(a, "", f"user{k}", f"{a} likes tea {k}", "2025-01-03 00:00:00")
             for a in AGENTS for k in range(2)],
        )  # fmt: skip
        conn.executemany(
            "INSERT INTO pending_memory_tasks(task_type, agent_id, payload, retries) "
            "VALUES (?, ?, ?, ?)",
            [("summarize", AGENTS[k % 3], f'{{"k": {k}}}', k) for k in range(5)],
        )
        if rows >= 10:
            # The last memory and one in the middle are gone: ids are not reused.
            conn.execute("DELETE FROM memories WHERE id IN (?, ?)", (rows, rows // 2))
            conn.execute("DELETE FROM pending_memory_tasks WHERE id = 5")
        conn.execute(
            "INSERT INTO cpersona_vector_model(tbl, model, dim, how) "
            "VALUES ('memories', 'hashing:384', 384, 'written'), "
            "('episodes', 'hashing:384', 384, 'written')"
        )
        conn.execute("INSERT INTO cpersona_reembed(tbl, model) VALUES ('memories', 'other:384')")
        conn.executemany(
            "INSERT INTO cpersona_reembed_vectors(tbl, row_id, embedding) VALUES (?, ?, ?)",
            [("memories", k + 1, vectors[k][::-1].tobytes()) for k in range(min(rows, 20))],
        )


def dump(path: Path | str) -> dict[str, list[tuple[object, ...]]]:
    """Every row of every copied table of the SQLite database at `path`, in key order (a table
    the database lacks, as a 2.5.x file lacks cpersona's own, has none)."""
    uri = f"{Path(path).resolve().as_uri()}?mode=ro"
    with closing(sqlite3.connect(uri, uri=True)) as conn:
        have = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        return {
            table: conn.execute(f"SELECT * FROM {table} ORDER BY {key}").fetchall()
            if table in have
            else []
            for table, key in TABLES.items()
        }


#: Tables of a database that `cpersona migrate` does not copy, each for a reason: the target's
#: own records (its schema, identity, migrations, AUTOINCREMENT marks) and the change logs of
#: the derived indexes the target rebuilds (FTS5's tables are recognised by name).
NOT_COPIED = frozenset(
    {"schema_version", "sqlite_sequence", "cpersona_meta", "cpersona_migrations",
     "vector_log", "fts_log", "cpersona_pauses"}
)  # fmt: skip


def uncompared_tables(path: Path | str) -> set[str]:
    """Tables of the SQLite database at `path` that neither `dump` reads nor are NOT_COPIED:
    rows a round trip compared with `dump` would not see."""
    uri = f"{Path(path).resolve().as_uri()}?mode=ro"
    with closing(sqlite3.connect(uri, uri=True)) as conn:
        names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    fts = {n for n in names if n.endswith("_fts") or "_fts_" in n}
    return names - fts - NOT_COPIED - set(TABLES)


def sequences(path: Path | str) -> dict[str, int]:
    with closing(sqlite3.connect(path)) as conn:
        return {
            str(r[0]): int(r[1])
            for r in conn.execute("SELECT name, seq FROM sqlite_sequence")
            if r[0] in TABLES
        }


#: The generated memories whose blobs are not float32 vectors (NULL after PostgreSQL).
ODD_BLOB_IDS = frozenset({2, 3, 4})


def fingerprint(
    path: Path | str, *, nulled: frozenset[int] = frozenset()
) -> dict[str, tuple[int, str]]:
    """(rows, SHA-256 of every row in key order) of each copied table: `dump` for databases
    too large to hold twice in memory. The memories in `nulled` count as having no embedding."""
    uri = f"{Path(path).resolve().as_uri()}?mode=ro"
    out: dict[str, tuple[int, str]] = {}
    with closing(sqlite3.connect(uri, uri=True)) as conn:
        have = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        for table, key in TABLES.items():
            digest, n = hashlib.sha256(), 0
            if table in have:
                for row in conn.execute(f"SELECT * FROM {table} ORDER BY {key}"):
                    if table == "memories" and row[0] in nulled:
                        row = (*row[:8], None, *row[9:])
                    digest.update(repr(row).encode())
                    n += 1
            out[table] = (n, digest.hexdigest())
    return out


# -- running the command and reading answers ------------------------------------------------

KILLED = Path(__file__).with_name("killed_migration.py")
WAIT = 240
#: For the 2.5.12 fixture and the generated databases (each answers some of them).
QUERIES = (
    ("alice", "Postgres connection pool"),
    ("alice", "会議"),
    ("bob", "Redis rate limiter"),
    ("alice", "deploy script force"),
    ("bob", "backups nightly"),
    ("alice", "ビルド Rust"),
    ("alice", "harbor tea"),
    ("bob", "note 12 maple"),
    ("carol", "東京 地図"),
)


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`python ARGS` with the hashing embedder and no configured PostgreSQL unless `env` says."""
    base = {k: v for k, v in os.environ.items() if k != "CPERSONA_DATABASE_URL"}
    full = {**base, "CPERSONA_EMBEDDING_MODE": "hashing", **(env or {})}
    return subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, env=full, timeout=WAIT
    )


def migrate_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return run("-m", "cpersona", "migrate", *args, env=env)


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def one_line(text: str) -> str:
    lines = text.strip().splitlines()
    assert len(lines) == 1, text
    return lines[0]


async def recall_answers(
    db: Path | str, *, database_url: str | None = None
) -> list[dict[str, object]]:
    """The recall answers to QUERIES through the MCP client, on `db` (or PostgreSQL)."""
    settings = Settings(db_path=str(db), database_url=database_url, embedding_mode="hashing")
    engine = Engine(settings, embedder=HashingProvider())
    try:
        async with Client(build_server(engine)) as client:
            out = []
            for agent, query in QUERIES:
                result = await client.call_tool("recall", {"agent_id": agent, "query": query})
                out.append(json.loads(result.content[0].text))
            return out
    finally:
        engine.close()
