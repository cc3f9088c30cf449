"""The lexical arms on PostgreSQL answer exactly what they answer on SQLite (issue 12):

(a) the full-text index kept from PostgreSQL's `fts_log` gives the same ids, in the same order,
    with the same bm25 doubles, as the one kept from SQLite for the same rows and writes (which
    is FTS5's answer: test_fts_oracle.py);
(b) the keyword arm (`memory_like`) returns SQLite's rows: ASCII-only case folding, `%`, `_`
    and `\\` literal, a NUL ending the pattern, the 50,000-byte pattern limit;
(c) two server processes on one PostgreSQL, with one cache directory or one each (one host or
    two): a row stored, updated or deleted through one is what the other's next recall sees.

Stored text holds no NUL here: PostgreSQL text cannot, and what a store does with one is the
storage layer's rule, not the lexical arms'.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from cpersona import _backend
from cpersona.derived.placement import cache_base
from cpersona.fts.format import HEADER_LEN, read_header
from cpersona.fts.index import FtsIndex
from cpersona.storage import fulltext as fts_sql
from cpersona.storage import open_database
from cpersona.storage import search as sql
from fts_support import HAS_CORE, WORDS, index_cases, indexed, scope
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcp import Client, StdioServerParameters

kernels = _backend.from_environment()

pytestmark = pytest.mark.skipif(not HAS_CORE, reason="the full-text index needs the Rust core")

NO_NUL = st.characters(codec="utf-8", exclude_characters="\x00")
stored_text = st.lists(st.sampled_from([w for w in WORDS if "\x00" not in w]), max_size=12).map(
    " ".join
) | st.text(alphabet=NO_NUL, max_size=40)
# Canonical stamps (some equal), other ISO forms, and text that is no date (key 0).
CREATED = [
    "2024-01-01 00:00:00",
    "2024-01-01 00:00:00",
    "2023-12-31 23:59:59",
    "2024-02-29T12:00:00Z",
    "2024-03-01 10:00:00.500",
    "2024-03-01 19:00:00+09:00",
    "2024-02-30 23:59:59",
    "2023-02-29 12:00:00",
    "1969-12-31 23:59:59",
    "0999-01-01 00:00:00",
    "2024-01-01 24:00:00",
    "2024-1-01 00:00:00",
    "",
    "yesterday",
]
ops_st = st.lists(
    st.tuples(
        st.sampled_from(["put", "put", "put", "update", "delete"]),
        st.integers(0, 1000),
        stored_text,
        st.sampled_from(["a", "b"]),
        st.sampled_from(["", "p"]),
        st.sampled_from(["", "c"]),
        st.sampled_from(CREATED),
    ),
    min_size=1,
    max_size=30,
)
SCOPES = (scope("a"), scope("b", "p"), scope("a", "", "c"), scope("b", None, "c"))
SLOW = settings(
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


class Corpus:
    """Writes turned into concrete statements once, so both databases get the same ones."""

    def __init__(self, table: str) -> None:
        self.table = table
        self.next_id = 1
        self.rows: dict[int, tuple[str, str, str, str]] = {}  # id -> memories' dedup key

    def statements(self, ops: list[tuple[Any, ...]]) -> list[tuple[str, tuple[Any, ...]]]:
        out: list[tuple[str, tuple[Any, ...]]] = []
        for op, pick, text, agent, project, channel, created in ops:
            ids = sorted(self.rows)
            key = (agent, project, channel, text)
            if op == "put" or not ids:
                if self.table == "memories" and key in self.rows.values():
                    continue  # the dedup index would refuse it on both backends
                row_id, self.next_id = self.next_id, self.next_id + 1
                self.rows[row_id] = key
                if self.table == "memories":
                    out.append(
                        (
                            "INSERT INTO memories(id, agent_id, project_id, channel, content, "
                            "timestamp, created_at) VALUES (?, ?, ?, ?, ?, '', ?)",
                            (row_id, agent, project, channel, text, created),
                        )
                    )
                else:
                    out.append(
                        (
                            "INSERT INTO episodes(id, agent_id, project_id, channel, summary, "
                            "keywords, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                            (row_id, agent, project, channel, text, text[::-1][:8], created),
                        )
                    )
            elif op == "update":
                target = ids[pick % len(ids)]
                old = self.rows[target]
                new = (agent, old[1], old[2], text)
                if self.table == "memories" and new in self.rows.values():
                    continue
                self.rows[target] = new
                col = "content" if self.table == "memories" else "summary"
                out.append(
                    (
                        f"UPDATE {self.table} SET {col} = ?, agent_id = ?, created_at = ? "
                        "WHERE id = ?",
                        (text, agent, created, target),
                    )
                )
            else:
                target = ids[pick % len(ids)]
                del self.rows[target]
                out.append((f"DELETE FROM {self.table} WHERE id = ?", (target,)))
        return out


def _run(db, statements) -> None:
    with db.atomic() as conn:
        for statement, params in statements:
            conn.execute(statement, params)


@pytest.fixture
def pg_db(pg_url):
    db = open_database("", database_url=pg_url)
    yield db
    db.close()


def _clear(db) -> None:
    _run(db, [("DELETE FROM memories", ()), ("DELETE FROM episodes", ())])


# -- (a) the full-text index ---------------------------------------------------------------------


@SLOW
@given(**index_cases(ops_st))
def test_full_text_on_postgresql_is_sqlites(
    pg_db, tmp_path_factory, first, then, queries, table, limit
):
    where = tmp_path_factory.mktemp("fts")
    lite = open_database(str(where / "db.sqlite"))
    _clear(pg_db)
    corpus = Corpus(table)
    indexes = [
        FtsIndex(lite, table, kernels.FtsIndex),
        FtsIndex(pg_db, table, kernels.FtsIndex, base=where / "pg"),
    ]
    try:
        before = corpus.statements(first)
        after = corpus.statements(then)
        for db, index in zip((lite, pg_db), indexes, strict=True):
            _run(db, before)
            index.sync()  # a rebuild, then the later writes applied from the log
            _run(db, after)
        for q in queries:
            for sc in SCOPES:
                want = indexed(indexes[0], q, sc, limit)
                assert indexed(indexes[1], q, sc, limit) == want, (q, sc)
        lite_core, pg_core = (index.current() for index in indexes)
        assert sorted(pg_core.ids().tolist()) == sorted(corpus.rows)
        for row_id in corpus.rows:  # scope hashes, created_at key, folded text
            assert pg_core.row(row_id) == lite_core.row(row_id), row_id
        assert indexes[1].verify() == []
    finally:
        for index in indexes:
            index.close()
        lite.close()


def test_deletes_and_updates_reach_the_index_of_a_process_that_already_loaded_it(pg_db, tmp_path):
    index = FtsIndex(pg_db, "memories", kernels.FtsIndex, base=tmp_path / "pg")
    corpus = Corpus("memories")
    texts = ["maybe the promotion", "hiring decided", "the promotion party", "東京都に行った"]
    _run(pg_db, corpus.statements([("put", 0, t, "a", "", "", CREATED[0]) for t in texts]))
    assert [i for i, _ in indexed(index, "promotion", scope("a"), 10)] == [1, 3]
    _run(pg_db, [("DELETE FROM memories WHERE id = 1", ())])
    _run(pg_db, [("UPDATE memories SET content = 'a promotion at last' WHERE id = 2", ())])
    _run(pg_db, [("UPDATE memories SET agent_id = 'b' WHERE id = 3", ())])
    assert [i for i, _ in indexed(index, "promotion", scope("a"), 10)] == [2]
    assert [i for i, _ in indexed(index, "promotion", scope("b"), 10)] == [3]
    assert indexed(index, "hiring", scope("a"), 10) == []
    assert sorted(index.current().ids().tolist()) == [2, 3, 4]
    assert index.verify() == []
    index.close()


def test_a_writer_that_has_not_committed_is_not_skipped(pg_db, pg_url, tmp_path):
    """The sequence behind fts_log.seq runs ahead of an open transaction: the index must wait
    for what that writer commits, not mark its seq applied before it can see the entry."""
    import psycopg

    index = FtsIndex(pg_db, "memories", kernels.FtsIndex, base=tmp_path / "pg")
    _run(pg_db, Corpus("memories").statements([("put", 0, "hiring decided", "a", "", "", "")]))
    index.sync()
    with psycopg.connect(pg_url) as writer:  # a transaction, left open
        writer.execute(
            "INSERT INTO memories(id, agent_id, content, timestamp) "
            "VALUES (2, 'a', 'the promotion', '')"
        )
        index.sync()  # reads while the entry exists but is not committed
        assert indexed(index, "promotion", scope("a"), 5) == []
        writer.commit()
    assert [i for i, _ in indexed(index, "promotion", scope("a"), 5)] != []
    assert index.verify() == []
    index.close()


def test_an_unusable_cache_directory_leaves_recall_working(pg_url, tmp_path, caplog):
    """No FTS5 to fall back to: the full-text arm is empty for the call, the keyword channel
    answers from LIKE, and the log says why."""
    import asyncio

    from cpersona.config import Settings
    from cpersona.engine import Engine
    from cpersona.server.app import build_server

    blocked = tmp_path / "cache"
    blocked.write_text("a file where the cache directory belongs")
    settings = Settings(
        db_path=str(tmp_path / "unused.db"),
        database_url=pg_url,
        cache_dir=str(blocked),
        embedding_mode="none",
        recall_mode="rsf",
    )
    engine = Engine(settings)

    async def run() -> list[str]:
        async with Client(build_server(engine)) as client:
            await _call(client, "store", {"agent_id": "team", "message": {"content": "a zebra"}})
            return [
                m["content"]
                for m in (await _call(client, "recall", {"agent_id": "team", "query": "zebra"}))[
                    "messages"
                ]
            ]

    try:
        assert asyncio.run(run()) == ["a zebra"]
    finally:
        engine.close()
    assert "full-text index" in caplog.text


def test_a_file_from_before_a_restore_is_rebuilt(pg_url, tmp_path):
    """A dump restored into another database (same db_uid, a new fts_log) is foreign."""
    import psycopg

    db = open_database("", database_url=pg_url)
    index = FtsIndex(db, "memories", kernels.FtsIndex, base=tmp_path / "pg")
    _run(db, Corpus("memories").statements([("put", 0, "the promotion", "a", "", "", "")]))
    index.sync()
    before = index.db_uid()
    with psycopg.connect(pg_url, autocommit=True) as conn:  # the restore recreates the table
        conn.execute("ALTER TABLE fts_log RENAME TO fts_log_old")
        conn.execute("CREATE TABLE fts_log (LIKE fts_log_old INCLUDING ALL)")
        conn.execute("INSERT INTO fts_log SELECT * FROM fts_log_old")
    index.close()
    again = FtsIndex(db, "memories", kernels.FtsIndex, base=tmp_path / "pg")
    assert again.db_uid() != before
    assert again.status().usable is False and "another database" in again.status().reason
    assert [i for i, _ in indexed(again, "promotion", scope("a"), 5)] == [1]
    assert again.status().usable is True
    again.close()
    db.close()


# -- (b) the keyword arm ------------------------------------------------------------------------

LIKE_PIECES = ["a", "A", "z", "Z", "%", "_", "\\", "é", "É", "ß", "İ", "ı", "K", "\u212a", "Σ"]
LIKE_PIECES += ["σ", "ς", "東京", "x_y", "50%", "\\%", "'", " ", "CVE-2024"]
like_piece = st.sampled_from(LIKE_PIECES)
like_text = st.lists(like_piece | st.text(alphabet=NO_NUL, max_size=3), max_size=8).map("".join)
like_query = st.lists(like_piece | st.text(max_size=2), min_size=0, max_size=4).map("".join)
source_st = st.sampled_from(["{}", '{"id": "src-1"}', '{"id": "other"}', "not json"])


@SLOW
@given(
    rows=st.lists(
        st.tuples(like_text, st.sampled_from("ab"), st.sampled_from(CREATED), source_st),
        min_size=1,
        max_size=12,
    ),
    query=like_query,
    read=st.sampled_from([1, 3, 50]),
    source=st.sampled_from(["", "src"]),
)
def test_keyword_arm_on_postgresql_returns_sqlites_rows(
    pg_db, tmp_path_factory, rows, query, read, source
):
    lite = open_database(str(tmp_path_factory.mktemp("like") / "db.sqlite"))
    _clear(pg_db)
    seen: set[tuple[str, str]] = set()
    statements = []
    for i, (text, agent, created, src) in enumerate(rows):
        if (agent, text) in seen:
            continue
        seen.add((agent, text))
        statements.append(
            (
                "INSERT INTO memories(id, agent_id, content, source, timestamp, created_at) "
                "VALUES (?, ?, ?, ?, '', ?)",
                (i + 1, agent, text, src, created),
            )
        )
    try:
        _run(lite, statements)
        _run(pg_db, statements)
        for sc in (scope("a"), scope("b")):
            want = sql.memory_like(lite, sc, source, query, read)
            assert sql.memory_like(pg_db, sc, source, query, read) == want, (query, sc)
    finally:
        lite.close()


@pytest.mark.parametrize("nul", [False, True])
def test_keyword_arm_past_the_pattern_limit(pg_db, tmp_path, nul):
    """Past 50,000 bytes SQLite tests `instr(lower(...))`, which compares a NUL too."""
    lite = open_database(str(tmp_path / "db.sqlite"))
    long = "Quarterly Review of the Ünits " * 2_000  # 60,000 bytes
    query = long + ("\x00" if nul else "")
    contents = [long, long.upper(), long.lower(), "before " + long + " after", long[:-10]]
    statements = [
        (
            "INSERT INTO memories(id, agent_id, content, timestamp) VALUES (?, 'a', ?, '')",
            (i + 1, text),
        )
        for i, text in enumerate(contents)
    ]
    try:
        _run(lite, statements)
        _run(pg_db, statements)
        want = sql.memory_like(lite, scope("a"), "", query, 50)
        assert sql.memory_like(pg_db, scope("a"), "", query, 50) == want
        # Ü is outside ASCII, so not folded: the row lowered to ü differs from the query.
        assert sorted(h.id for h in want) == ([] if nul else [1, 2, 4])
    finally:
        lite.close()


# -- (c) two server processes -------------------------------------------------------------------

WAIT = 60.0


def _params(url: str, cache: Path) -> StdioServerParameters:
    env = {
        "CPERSONA_DATABASE_URL": url,
        "CPERSONA_CACHE_DIR": str(cache),
        "CPERSONA_EMBEDDING_MODE": "none",  # only the lexical arms answer
        # rsf: under rrf the heuristic gate (retrieval.md §7.3) drops a keyword-only match in
        # a corpus this small; the test is about what the index sees, not the gate.
        "CPERSONA_RECALL_MODE": "rsf",
        "CPERSONA_DB_PATH": str(cache / "unused.db"),
    }
    for name in ("PYTHONPATH", "HOME"):
        if name in os.environ:
            env[name] = os.environ[name]
    return StdioServerParameters(command=sys.executable, args=["-m", "cpersona"], env=env)


async def _call(client: Client, name: str, args: dict[str, Any]) -> dict[str, Any]:
    result = await client.call_tool(name, args)
    assert not result.is_error, result.content[0].text
    return json.loads(result.content[0].text)


async def _found(client: Client, query: str) -> list[str]:
    out = await _call(client, "recall", {"agent_id": "team", "query": query})
    return [m["content"] for m in out["messages"]]


@pytest.mark.anyio
@pytest.mark.parametrize("hosts", ["one host", "two hosts"])
async def test_two_processes_see_each_others_writes(pg_url, tmp_path, hosts):
    cache_a = tmp_path / "a"
    cache_b = cache_a if hosts == "one host" else tmp_path / "b"
    for cache in (cache_a, cache_b):
        cache.mkdir(exist_ok=True)
    # "zebra quokka" is no substring of any content: only the full-text arm can find it.
    first = "a quokka lives near the zebra"
    second = "a wombat lives near the giraffe"
    with anyio.fail_after(4 * WAIT):
        async with (
            Client(_params(pg_url, cache_a)) as a,
            Client(_params(pg_url, cache_b)) as b,
        ):
            await _call(a, "store", {"agent_id": "team", "message": {"content": "warm-up row"}})
            assert await _found(b, "zebra quokka") == []  # b loads its index now
            stored = await _call(a, "store", {"agent_id": "team", "message": {"content": first}})
            assert await _found(b, "zebra quokka") == [first]
            await _call(
                a,
                "update_memory",
                {"agent_id": "team", "memory_id": stored["id"], "content": second},
            )
            assert await _found(b, "giraffe wombat") == [second]
            assert await _found(b, "zebra quokka") == []
            await _call(a, "delete_memory", {"agent_id": "team", "memory_id": stored["id"]})
            assert await _found(b, "giraffe wombat") == []
    # What b's index file holds after its last recall (read as it is, not brought current).
    db = open_database("", database_url=pg_url)
    try:
        path = Path(f"{cache_base(str(cache_b), db.path)}.memories.fts")
        with open(path, "rb") as f:
            header = read_header(f.fileno())
            assert header is not None
            core = kernels.FtsIndex()
            core.apply(os.pread(f.fileno(), header.end - HEADER_LEN, HEADER_LEN))
        # Not `==`: a position on PostgreSQL is a transaction horizon, which any later
        # transaction of the cluster moves on (b's own recall bookkeeping after its answer).
        # That the file took every change is what its rows show: the delete applied.
        assert header.applied_seq <= fts_sql.max_seq(db)
        assert sorted(core.ids().tolist()) == [stored["id"] - 1]  # the warm-up row only
    finally:
        db.close()


def test_index_command_on_postgresql(pg_db, pg_url, tmp_path):
    """`cpersona index status|rebuild|verify` finds the files in the host's cache directory."""
    import subprocess

    _run(pg_db, Corpus("memories").statements([("put", 0, "the promotion", "a", "", "", "")]))
    env = {**os.environ, "CPERSONA_DATABASE_URL": pg_url, "CPERSONA_CACHE_DIR": str(tmp_path)}

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "cpersona", "index", *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )

    where = f"{cache_base(str(tmp_path), pg_db.path)}.memories.fts"
    missing = cli("status", "--kind", "fulltext")
    assert missing.returncode == 1 and f"{where}: not usable (missing)" in missing.stdout
    rebuilt = cli("rebuild", "--kind", "fulltext")
    assert rebuilt.returncode == 0 and "memories full-text: rebuilt, 1 rows" in rebuilt.stdout
    verified = cli("verify")
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert "memories full-text: OK" in verified.stdout
    # The vector index files live in the same cache directory (issue 19).
    assert "memories: OK" in verified.stdout
    vector = cli("status", "--kind", "vector")
    vectors = f"{cache_base(str(tmp_path), pg_db.path)}.memories.vec"
    assert vector.returncode == 0 and f"memories: {vectors}: usable" in vector.stdout


# -- (d) recall through the tools ------------------------------------------------------------

CORPUS = [
    "We decided to delay the promotion until the hiring plan is done",
    "The load test failed twice on Tuesday; maybe the pool size is too small",
    "Dinner with the team at the Alps restaurant, then a walk",
    "CVE-2024-3094 remediation confirmed across the fleet",
    "東京都の会議は火曜日に変更された",
    "京都への出張は来週の月曜日",
    "Café au lait in the morning, STRASSE then straße",
    "maybe MAYBE maybe: the manager said the budget review is next week",
    "the promotion party is on Friday at the office",
    "hiring decided: two engineers and one designer",
]
QUERIES = [
    "promotion hiring",
    "pool size load",
    "東京都 会議",
    "京都",
    "CVE-2024-3094",
    "maybe the manager",
    "café STRASSE",
    "budget review next week",
    "zebra",
    "the",
]


async def _recalls(settings: Any) -> list[dict[str, Any]]:
    from cpersona.engine import Engine
    from cpersona.server.app import build_server

    engine = Engine(settings)
    try:
        async with Client(build_server(engine)) as client:
            for i, text in enumerate(CORPUS):
                message = {"content": text, "timestamp": f"2025-01-{i + 1:02d}T10:00:00Z"}
                await _call(client, "store", {"agent_id": "team", "message": message})
            await _call(client, "archive_episode", {"agent_id": "team", "summary": CORPUS[0]})
            return [
                await _call(client, "recall", {"agent_id": "team", "query": q, "limit": 5})
                for q in QUERIES
            ]
    finally:
        engine.close()


@pytest.mark.anyio
async def test_lexical_recall_answers_are_the_same_on_both_backends(pg_url, tmp_path):
    """Full-text, keyword and episode arms through `recall`, without embeddings. rsf: under
    rrf and cascade the heuristic gate keeps no lexical-only row of a corpus this small."""
    from cpersona.config import Settings

    mode = "rsf"
    base = Settings(db_path=str(tmp_path / "m.db"), embedding_mode="none", recall_mode=mode)
    lite = await _recalls(base)
    pg = await _recalls(
        Settings(
            db_path=str(tmp_path / "unused.db"),
            database_url=pg_url,
            embedding_mode="none",
            recall_mode=mode,
        )
    )
    # The episode is stamped with the moment it was archived, a second apart on the two
    # backends when the clock ticks between the runs: everything else must match exactly.
    assert _unstamped(pg) == _unstamped(lite)
    assert sum(len(out["messages"]) for out in lite) >= 10  # the queries do find rows


def _unstamped(answers: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {
            **out,
            "messages": [
                {k: v for k, v in m.items() if k != "timestamp" or not m["ref"].startswith("ep:")}
                for m in out["messages"]
            ],
        }
        for out in answers
    ]
