"""SQL of the recall pipeline: FTS and keyword channels, scope counts, boundary, hydration."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

from cpersona.errors import FullTextUnavailable
from cpersona.storage.error_kinds import translating
from cpersona.storage.interface import Connection, Row, Store
from cpersona.storage.rows import EpisodeRow, MemoryRow, projection
from cpersona.storage.scan_request import Scope
from cpersona.timerange import TimeRange, first_in_span

#: The scope the statements below read (storage/scan_request.py); the name the callers of
#: this module have always used for it.
ScopeSql = Scope


def _source_filter(db: Store, alias: str, prefix: str) -> tuple[str, list[object]]:
    if not prefix:
        return "TRUE", []
    return f"substr({db.ops.source_id(alias)}, 1, ?) = ?", [len(prefix), prefix]


@dataclass(frozen=True, slots=True)
class MemoryHit:
    id: int
    msg_id: str
    content: str
    source: str
    timestamp: str
    channel: str
    project_id: str
    agent_id: str
    bm25: float | None


@dataclass(frozen=True, slots=True)
class EpisodeHit:
    id: int
    summary: str
    start_time: str | None
    created_at: str
    resolved: bool
    channel: str
    project_id: str
    agent_id: str
    bm25: float | None


_LIKE_LIMIT = sqlite3.SQLITE_LIMIT_LIKE_PATTERN_LENGTH
# The hits are projections of the rows (storage/rows.py); bm25 comes from the arm that ranks.
_MEM_COLS = projection(MemoryHit, MemoryRow, extra=("bm25",)).select_list("m")
_EP_COLS = projection(EpisodeHit, EpisodeRow, extra=("bm25",)).select_list("e")


def _mem(r: Row, bm25: float | None) -> MemoryHit:
    t = r[:8]  # a plain tuple: one slice, not eight item reads (a Python call on PostgreSQL)
    return MemoryHit(t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7], bm25)


def _ep(r: Row, bm25: float | None) -> EpisodeHit:
    return EpisodeHit(r[0], r[1], r[2], r[3], bool(r[4]), r[5], r[6], r[7], bm25)


#: Appended to `_MEM_COLS` when a range must be tested: the fallback for an unparseable stamp.
_MEM_CREATED = ", m.created_at"


def _like_limit(conn: Connection) -> int:
    """SQLite's limit on a LIKE pattern's length in bytes (an SQLite reader only)."""
    return cast(sqlite3.Connection, conn).getlimit(_LIKE_LIMIT)


def _span_filter(db: Store, span: TimeRange | None) -> tuple[str, list[object]]:
    """On PostgreSQL the stored `instant_key` (storage/pg/vectors.py) tests the range in SQL;
    a row whose key is NULL is left to the Python test that follows. SQLite has no such
    column: every row read is tested in Python."""
    if span is None or db.dialect != "postgresql":
        return "TRUE", []
    return "(m.instant_key IS NULL OR (m.instant_key >= ? AND m.instant_key < ?))", [*span.bounds()]


def _need_fts5(db: Store) -> None:
    if db.dialect == "postgresql":
        raise FullTextUnavailable("PostgreSQL has no FTS5; the full-text index could not answer")


@translating
def memory_fts(
    db: Store, scope: ScopeSql, source_prefix: str, match: str, limit: int
) -> list[MemoryHit]:
    _need_fts5(db)
    where, params = scope.where("m")
    sw, sp = _source_filter(db, "m", source_prefix)
    sql = f"""SELECT {_MEM_COLS}, bm25(memories_fts) AS score{_MEM_CREATED}
            FROM memories_fts JOIN memories m ON m.id = memories_fts.rowid
            WHERE memories_fts MATCH ? AND {where} AND {sw}
            ORDER BY score, m.id"""
    if scope.span is None:
        rows = db.query(sql + " LIMIT ?", [match, *params, *sp, limit])
    else:
        cur = db.reader().execute(sql, [match, *params, *sp])
        rows = first_in_span(cur, scope.span, 4, 9, limit)
    return [_mem(r, float(r[8])) for r in rows]


@translating
def memory_like(
    db: Store, scope: ScopeSql, source_prefix: str, text: str, read: int
) -> list[MemoryHit]:
    """Newest rows whose content contains `text`, ASCII case folded (the LIKE fallback, §4.7).

    SQLite refuses a LIKE pattern longer than SQLITE_LIMIT_LIKE_PATTERN_LENGTH (50,000 bytes,
    a compile-time ceiling no connection can raise): such a query was answered with
    "LIKE or GLOB pattern too complex" (issue 11). Past the limit the same test runs as
    `instr(lower(content), lower(text))`: SQLite's lower() folds ASCII only, as LIKE does, so
    the rows are the same ones.
    """
    where, params = scope.where("m")
    sw, sp = _source_filter(db, "m", source_prefix)
    pattern = "%" + text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
    conn = db.reader()
    if db.dialect == "postgresql":
        test, arg = _like_postgresql(pattern, text)
        if test is None:
            return []
    elif len(pattern.encode("utf-8", "surrogatepass")) <= _like_limit(conn):
        test, arg = "m.content LIKE ? ESCAPE '\\'", pattern
    else:
        ops = db.ops
        test = f"{ops.position(ops.ascii_lower('?'), ops.ascii_lower('m.content'))} > 0"
        arg = text
    tw, tp = _span_filter(db, scope.span)
    sql = f"""SELECT {_MEM_COLS}{_MEM_CREATED} FROM memories m
            WHERE {test} AND {where} AND {sw} AND {tw}
            ORDER BY m.created_at DESC, m.id DESC"""
    if scope.span is None:
        rows = conn.execute(sql + " LIMIT ?", [arg, *params, *sp, read]).fetchall()
    else:
        cur = conn.execute(sql, [arg, *params, *sp, *tp])
        rows = first_in_span(cur, scope.span, 4, 8, read)
    return [_mem(r, None) for r in rows]


#: SQLite's default SQLITE_LIMIT_LIKE_PATTERN_LENGTH, where its test changes (memory_like).
_SQLITE_LIKE_PATTERN_BYTES = 50_000


def _like_postgresql(pattern: str, text: str) -> tuple[str | None, str]:
    """SQLite's test of `memory_like` on PostgreSQL, matching the same rows; None: no row can.

    SQLite's LIKE folds A-Z only. PostgreSQL's LIKE folds nothing, and its ILIKE folds by the
    collation: under "C" (the text columns', storage/pg/schema.py; said again here) that is
    A-Z only, exactly SQLite's rule, at LIKE's speed (`lower()` on both sides, a translate()
    per row, took 20 times as long: docs/compatibility.md).
    SQLite's LIKE reads its pattern as a C string, so it ends at the first NUL: `%ab<NUL>cd%`
    is `%ab` (content ending in "ab"); PostgreSQL text holds no NUL, so the cut is made here.
    Past the pattern limit SQLite's `instr(lower(...))` compares every character, NUL
    included (no text stored in PostgreSQL contains one), and otherwise the same substring.
    """
    if "\x00" in text:
        if len(pattern.encode("utf-8", "surrogatepass")) > _SQLITE_LIKE_PATTERN_BYTES:
            return None, text
        pattern = pattern.split("\x00", 1)[0]
    return "m.content COLLATE \"C\" ILIKE ? ESCAPE '\\'", pattern


@translating
def memory_recent(db: Store, scope: ScopeSql, source_prefix: str, limit: int) -> list[MemoryHit]:
    where, params = scope.where("m")
    sw, sp = _source_filter(db, "m", source_prefix)
    tw, tp = _span_filter(db, scope.span)
    sql = f"""SELECT {_MEM_COLS}{_MEM_CREATED} FROM memories m WHERE {where} AND {sw} AND {tw}
            ORDER BY m.created_at DESC, m.id DESC"""
    if scope.span is None:
        rows = db.query(sql + " LIMIT ?", [*params, *sp, limit])
    else:
        cur = db.reader().execute(sql, [*params, *sp, *tp])
        rows = first_in_span(cur, scope.span, 4, 8, limit)
    return [_mem(r, None) for r in rows]


@translating
def episode_fts(db: Store, scope: ScopeSql, match: str, limit: int) -> list[EpisodeHit]:
    _need_fts5(db)
    where, params = scope.where("e")
    sql = f"""SELECT {_EP_COLS}, bm25(episodes_fts) AS score
            FROM episodes_fts JOIN episodes e ON e.id = episodes_fts.rowid
            WHERE episodes_fts MATCH ? AND {where}
            ORDER BY score, e.id"""
    if scope.span is None:
        rows = db.query(sql + " LIMIT ?", [match, *params, limit])
    else:
        rows = first_in_span(db.reader().execute(sql, [match, *params]), scope.span, 2, 3, limit)
    return [_ep(r, float(r[8])) for r in rows]


def _by_ids(db: Store, ids: Sequence[int], sql: str, params: Sequence[object] = ()) -> list[Row]:
    """The rows of `sql` (its `{marks}` the id list, `params` after the ids), in batches of
    500 ids."""
    rows: list[Row] = []
    for start in range(0, len(ids), 500):
        batch = list(ids[start : start + 500])
        marks = ",".join("?" * len(batch))
        rows += db.query(sql.replace("{marks}", marks), [*batch, *params])
    return rows


@translating
def memories_by_id(
    db: Store, ids: Sequence[int], scope: ScopeSql, source_prefix: str
) -> dict[int, MemoryHit]:
    """Hydrate survivors, re-applying the scope and the source filter (batches of 500).

    `NOT INDEXED` keeps SQLite on rowid lookups: with the agent's scope in the WHERE clause and
    no ANALYZE statistics, the planner otherwise walks the agent's whole index range and tests
    each row against the id list, so hydrating 10 rows of a 237,654-row agent took 29 ms
    instead of 0.02 ms (docs/performance.md, "What these benchmarks found").
    """
    where, params = scope.where("m")
    sw, sp = _source_filter(db, "m", source_prefix)
    sql = (
        f"SELECT {_MEM_COLS} FROM memories m {db.ops.not_indexed()} "
        f"WHERE m.id IN ({{marks}}) AND {where} AND {sw}"
    )
    return {r[0]: _mem(r, None) for r in _by_ids(db, ids, sql, [*params, *sp])}


@translating
def episodes_by_id(db: Store, ids: Sequence[int], scope: ScopeSql) -> dict[int, EpisodeHit]:
    """As `memories_by_id` (rowid lookups, `NOT INDEXED`), for episodes."""
    where, params = scope.where("e")
    sql = (
        f"SELECT {_EP_COLS} FROM episodes e {db.ops.not_indexed()} "
        f"WHERE e.id IN ({{marks}}) AND {where}"
    )
    return {r[0]: _ep(r, None) for r in _by_ids(db, ids, sql, params)}


@translating
def embeddings(db: Store, table: str, ids: Sequence[int]) -> dict[int, bytes]:
    """Stored BLOBs by id (for the cosine backfill)."""
    if table not in ("memories", "episodes"):
        raise ValueError(table)
    sql = f"SELECT id, embedding FROM {table} WHERE id IN ({{marks}}) AND embedding IS NOT NULL"
    return {r[0]: bytes(r[1]) for r in _by_ids(db, ids, sql)}


def _capped_count(table: str, where: str, limit: str = "?") -> str:
    return f"SELECT COUNT(*) FROM (SELECT 1 FROM {table} WHERE {where} LIMIT {limit}) AS capped"


@translating
def pool_count(db: Store, scope: ScopeSql, cap: int | None = None) -> int:
    """N_pool of retrieval.md §7.1: the rows of both tables in scope; with `cap`, min(N, cap).

    The capped count reads at most `cap` index entries per table instead of the agent's whole
    range (recall passes the pool size past which the gate's decisions no longer change).
    """
    where, params = scope.where()
    if cap is None:
        m = db.query_one(f"SELECT COUNT(*) FROM memories WHERE {where}", params)
        e = db.query_one(f"SELECT COUNT(*) FROM episodes WHERE {where}", params)
        return int(m[0] if m else 0) + int(e[0] if e else 0)
    total = 0
    for table in ("memories", "episodes"):
        if total >= cap:
            break
        row = db.query_one(_capped_count(table, where), [*params, cap - total])
        total += int(row[0] if row else 0)
    return total


def _span_end(db: Store, scope: ScopeSql, direction: str) -> tuple[str, list[object]]:
    where, params = scope.where()
    sql = f"""SELECT timestamp FROM memories
                WHERE {where} AND timestamp != ''
                  AND {db.ops.stamp_instant("memories")} IS NOT NULL
                ORDER BY timestamp {direction} LIMIT 1"""
    return sql, params


@translating
def timestamp_span(db: Store, scope: ScopeSql) -> tuple[str | None, str | None]:
    """MIN and MAX (text order) of memory timestamps that are non-empty and SQL-parseable.

    Read as the first and the last such timestamp in the order of `idx_memories_span`
    (agent_id, timestamp, ...): under the julianday() filter, MIN() and MAX() made SQLite test
    every row of the agent after each write (40 ms at 237,654 rows), where an ordered read
    stops at the first timestamp that parses (docs/performance.md).
    """
    ends = []
    for direction in ("ASC", "DESC"):
        row = db.query_one(*_span_end(db, scope, direction))
        ends.append(None if row is None else row[0])
    return ends[0], ends[1]


def _latest_episode(db: Store, scope: ScopeSql) -> tuple[str, list[object]]:
    where, params = scope.where()
    instant = db.ops.created_instant()
    sql = f"""SELECT created_at FROM episodes WHERE {where}
            ORDER BY {instant} IS NULL, {instant} DESC, created_at DESC
            LIMIT 1"""
    return sql, params


@translating
def latest_episode_created(db: Store, scope: ScopeSql) -> str | None:
    """created_at of the newest episode in scope by parsed instant (unparseable last)."""
    row = db.query_one(*_latest_episode(db, scope))
    return None if row is None else str(row[0])


@dataclass(frozen=True, slots=True)
class ScopeFacts:
    """What recall reads of a scope besides rows (retrieval/scope_reads.py)."""

    profile: str | None
    latest_episode: str | None
    #: N_pool capped, and the timestamp span; None when not asked for.
    stats: tuple[int, tuple[str | None, str | None]] | None


def scope_facts_statement(
    db: Store, scope: ScopeSql, profile_sql: str, cap: int | None
) -> tuple[str, list[object]]:
    """`profile_sql` (one `?`: the agent), `latest_episode_created`, and with `cap`
    `pool_count(cap=cap)` and `timestamp_span`, as scalar subqueries of one statement: the
    same answers in one round trip (PostgreSQL's; SQLite asks each on its own). The capped
    pool is min(cap, memories capped + episodes capped), which is `pool_count`'s sum.

    The cap is written into the text, not bound: with `LIMIT $n` PostgreSQL's plan cache kept
    planning the statement anew for each recall (custom plans: 0.22 ms a statement against
    0.07 ms with the cap in the text, whose generic plan it keeps; docs/performance.md)."""
    parts: list[tuple[str, list[object]]] = [(profile_sql, [scope.agent_id])]
    parts.append(_latest_episode(db, scope))
    if cap is not None:
        where, params = scope.where()
        n = str(int(cap))  # an int of ours, never the caller's text
        pools = f"({_capped_count('memories', where, n)}) + ({_capped_count('episodes', where, n)})"
        parts += [(f"LEAST({n}, {pools})", [*params, *params])]
        parts += [_span_end(db, scope, "ASC"), _span_end(db, scope, "DESC")]
    sql = "SELECT " + ", ".join(f"({p})" for p, _ in parts)
    return sql, [v for _, ps in parts for v in ps]


def scope_facts_of(row: Row) -> ScopeFacts:
    """The answer of `scope_facts_statement` (its one row)."""
    latest = None if row[1] is None else str(row[1])
    profile = None if row[0] is None else str(row[0])
    stats = None if len(row) < 5 else (int(row[2]), (row[3], row[4]))
    return ScopeFacts(profile, latest, stats)


@translating
def scope_facts(db: Store, scope: ScopeSql, profile_sql: str, cap: int | None) -> ScopeFacts:
    """`scope_facts_statement`'s answers."""
    row = db.query_one(*scope_facts_statement(db, scope, profile_sql, cap))
    assert row is not None  # a SELECT of scalar subqueries answers one row
    return scope_facts_of(row)


@translating
def recall_history(db: Store, ids: Sequence[int]) -> dict[int, tuple[int, str | None]]:
    sql = "SELECT id, recall_count, last_recalled_at FROM memories WHERE id IN ({marks})"
    return {r[0]: (int(r[1]), r[2]) for r in _by_ids(db, ids, sql)}


@translating
def bump_recall_counts(db: Store, ids: Sequence[int]) -> None:
    if not ids:
        return
    # Row locks only (no maintenance lock: a recall must not queue behind other servers'
    # writes); ids in ascending order, so two bumps of overlapping rows never deadlock.
    ordered = sorted(set(ids))
    with db.atomic(exclusive=False) as conn:
        for start in range(0, len(ordered), 500):
            batch = ordered[start : start + 500]
            marks = ",".join("?" * len(batch))
            conn.execute(
                f"""UPDATE memories SET recall_count = recall_count + 1,
                    last_recalled_at = {db.ops.now()} WHERE id IN ({marks})""",
                batch,
            )
