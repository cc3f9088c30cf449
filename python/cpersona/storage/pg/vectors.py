"""The vector arm on PostgreSQL: the scoped window scan of retrieval.md §4.2-4.3 in one query.

SQLite's path (storage/embeddings.py `window_ids` + `blobs`, scored in Python) orders the window by
`COALESCE(CAST(strftime('%s', created_at) AS INTEGER), 0) DESC, id DESC`. PostgreSQL keeps that
key in a stored generated column `created_key` (storage/pg/keys.py), so the window is read from
one btree in order and no row's key is computed at query time.

A row's score is pgvector's inner product, negated back: float32 products summed in float32 in
row order, widened to double. The Rust and numpy kernels sum in another order, so a score can
differ from theirs in the last float32 bits (docs/compatibility.md); positions, scopes, the
threshold rule and the (score DESC, position ASC) cut are the same.

The source filter reads a stored generated column `source_id` (`source`'s `$.id` as text). A
time-scoped scan (`span_scan`, issue 22) reads a third, `instant_key` (the row's instant where
SQL reads its stamp exactly as Python does, else NULL and the row is timed in Python).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cpersona.storage.filters import scope_where
from cpersona.storage.pg import keys
from cpersona.storage.scan_request import ScanLimits, Scope
from cpersona.timerange import row_time

if TYPE_CHECKING:
    from cpersona.storage.interface import Row as ResultRow
    from cpersona.storage.pg.connection import Row
    from cpersona.storage.pg.db import PgDatabase

TABLES = ("memories", "episodes")
#: Names of the server-side cursors `stream_rows` opens (unique in a session).
_CURSORS = itertools.count()


def stream_rows(
    db: PgDatabase, sql: str, params: Sequence[Any] = (), size: int = 2048
) -> Iterator[list[Row]]:
    """The rows of one storage statement (`?` placeholders) in batches of `size`, through a
    server-side cursor inside this thread's read snapshot (the caller's when one is open):
    an index rebuild reads every embedded row of a table in one snapshot, as SQLite's one
    statement does, without holding them all at once (a PgCursor fetches its result whole:
    about 2 KB a row of 384 floats, 200 MB at 100,000 rows). Vectors arrive in binary and load
    as float32 bytes (storage/pg/adapters.py)."""
    from cpersona.storage.pg.connection import row_maker
    from cpersona.storage.pg.dialect import placeholders

    with db.snapshot() as reader:
        pinned = reader.pinned
        assert pinned is not None  # inside snapshot()
        name = f"cpersona_rows_{next(_CURSORS)}"
        with pinned.raw.cursor(name, binary=True) as cur:
            cur.execute(placeholders(sql), tuple(params))
            make = None
            while batch := cur.fetchmany(size):
                if make is None:
                    assert cur.description is not None
                    make = row_maker([c.name for c in cur.description])
                yield [make(r) for r in batch]


def schema_statements() -> list[str]:
    """DDL the PostgreSQL schema runs after creating `memories` and `episodes` (idempotent).

    The window index is partial (`embedding IS NOT NULL`): only embedded rows take window
    positions, so the scan walks the agent's embedded rows newest first and stops at the reach.
    No HNSW/IVFFlat index: an approximate index could change which rows a recall returns.
    """
    out = []
    for table in TABLES:
        out.append(
            f"ALTER TABLE {table} ADD COLUMN IF NOT EXISTS created_key bigint "
            f"GENERATED ALWAYS AS ({keys.created_key('created_at')}) STORED"
        )
    for table, stamp in (("memories", "timestamp"), ("episodes", "start_time")):
        out.append(
            f"ALTER TABLE {table} ADD COLUMN IF NOT EXISTS instant_key bigint "
            f"GENERATED ALWAYS AS ({keys.instant_key(stamp)}) STORED"
        )
    # A column, not an expression in the query: its statistics let the planner see how many
    # rows a source prefix keeps (its guess for an expression, 0.5 %, made it sort the whole
    # agent instead of walking the window index).
    out.append(
        "ALTER TABLE memories ADD COLUMN IF NOT EXISTS source_id text "
        f"GENERATED ALWAYS AS ({keys.source_id('source')}) STORED"
    )
    for table in TABLES:
        out.append(
            f"CREATE INDEX IF NOT EXISTS {table}_vector_window ON {table} "
            "(agent_id, created_key DESC, id DESC) WHERE embedding IS NOT NULL"
        )
        # A time-scoped window (span_scan): the range's rows by their instant, and the rows
        # whose instant SQL cannot read, in window order.
        out.append(
            f"CREATE INDEX IF NOT EXISTS {table}_vector_instant ON {table} "
            "(agent_id, instant_key) INCLUDE (created_key, id) WHERE embedding IS NOT NULL"
        )
        out.append(
            f"CREATE INDEX IF NOT EXISTS {table}_vector_no_instant ON {table} "
            "(agent_id, created_key DESC, id DESC) "
            "WHERE embedding IS NOT NULL AND instant_key IS NULL"
        )
    return out


@dataclass(frozen=True, slots=True)
class WindowHits:
    """Ids and scores, best first, of the near window and of the far region."""

    near: list[tuple[int, float]]
    far: list[tuple[int, float]]


def _where(table: str, scope: Scope) -> tuple[str, list[object]]:
    parts, params = scope_where(scope.agent_id, scope.project, scope.channel)
    parts.append("embedding IS NOT NULL")
    if source_prefix := scope.source_prefix:
        if table != "memories":
            # Episodes carry no source: a source filter admits none of them.
            parts.append("FALSE")
        else:
            parts.append("source_id ^@ ?")
            params.append(source_prefix)
    return " AND ".join(parts), params


# The two lists cut from the scored rows `s` (id, pos, score) of a window: near, then far.
_REGIONS = """
    (SELECT 0 AS far, id, score, pos FROM s
     WHERE pos < ? AND score >= CAST(? AS double precision)
     ORDER BY score DESC, pos ASC LIMIT ?)
    UNION ALL
    (SELECT 1 AS far, id, score, pos FROM s
     WHERE pos >= ? AND score >= CAST(? AS double precision)
     ORDER BY score DESC, pos ASC LIMIT ?)"""


def _region_params(limits: ScanLimits) -> list[object]:
    """The parameters of `_REGIONS`."""
    threshold = float(limits.threshold)
    return [limits.window, threshold, max(limits.k, 0), limits.window, threshold, limits.kept_far]


def _regions(rows: Iterable[ResultRow]) -> WindowHits:
    """The near and far lists of `_REGIONS`' rows, each best first."""
    found: tuple[list[tuple[float, int, int]], list[tuple[float, int, int]]] = ([], [])
    for row in rows:
        found[int(row[0])].append((-float(row[2]), int(row[3]), int(row[1])))
    # UNION ALL keeps each branch's order in practice, but SQL does not promise it.
    near, far = (sorted(f) for f in found)
    return WindowHits([(i, -s) for s, _, i in near], [(i, -s) for s, _, i in far])


def window_scan(
    db: PgDatabase, table: str, query: bytes, scope: Scope, limits: ScanLimits
) -> WindowHits:
    """The near list and the far list of one table, in one statement (module docstring); a
    time-scoped scope is `span_scan`'s."""
    if table not in TABLES:
        raise ValueError(f"no vector scan for table {table!r}")
    if scope.span is not None:
        raise ValueError("window_scan of a time-scoped scope: span_scan reads its range")
    vector = db.vector_param(query)
    if vector is None:  # empty, not whole float32s, or not finite: nothing can match it
        return WindowHits([], [])
    if limits.keeps_nothing():
        return WindowHits([], [])
    where, params = _where(table, scope)
    # One pass down the partial btree, newest first, stopped at the last position: row_number()
    # over the same order is each row's position, and each row is scored as it passes (nothing
    # but (id, pos, score) is kept). Foreign-width rows keep their position and score NULL
    # (pgvector refuses mixed dimensions), which no threshold admits.
    sql = f"""
        WITH s AS MATERIALIZED (
            SELECT id, row_number() OVER win - 1 AS pos,
                CASE WHEN vector_dims(embedding) = ?
                THEN -(embedding <#> (SELECT CAST(? AS vector))) END AS score
            FROM {table} WHERE {where}
            WINDOW win AS (ORDER BY created_key DESC, id DESC)
            ORDER BY created_key DESC, id DESC
            LIMIT ?
        ){_REGIONS}
    """
    params = [len(vector.floats), vector, *params, limits.positions, *_region_params(limits)]
    return _regions(db.reader().execute(sql, params).fetchall())


def span_scan(
    db: PgDatabase, table: str, query: bytes, scope: Scope, limits: ScanLimits
) -> WindowHits:
    """`window_scan` of a time-scoped scan: positions go to the rows whose instant `scope.span`
    admits, in the same order (created_key DESC, id DESC).

    The rows whose stored `instant_key` is in the range come from its index (a past week is
    read as that week, not by walking every newer row), the newest `limit` of them; rows whose
    key is NULL (a stamp SQL cannot read exactly; rare) are read from their own partial index
    and their instant tested in Python (cpersona.timerange). The two are merged in window
    order, and only the first `limit` rows are scored."""
    if table not in TABLES:
        raise ValueError(f"no vector scan for table {table!r}")
    span = scope.span
    if span is None:
        raise ValueError("span_scan needs a time-scoped scope: window_scan scans the others")
    vector = db.vector_param(query)
    if vector is None or limits.keeps_nothing():
        return WindowHits([], [])
    limit = limits.positions
    where, params = _where(table, scope)
    stamp = "timestamp" if table == "memories" else "start_time"
    lo, hi = span.bounds()
    score = (
        "CASE WHEN vector_dims(t.embedding) = ? "
        "THEN -(t.embedding <#> (SELECT CAST(? AS vector))) END"
    )
    dims = [len(vector.floats), vector]
    reader = db.reader()
    unkeyed = reader.execute(
        f"SELECT id, created_key, {stamp}, created_at FROM {table} "
        f"WHERE {where} AND instant_key IS NULL ORDER BY created_key DESC, id DESC",
        params,
    ).fetchall()
    admitted = [int(r[0]) for r in unkeyed if span.admits(row_time(r[2], r[3]))][:limit]
    # The range's newest `limit` rows by the instant index; each scored by one lookup (a join
    # let the planner hash the whole table).
    keyed = f"""w AS MATERIALIZED (
                SELECT id, created_key FROM {table}
                WHERE {where} AND instant_key >= ? AND instant_key < ?
                ORDER BY created_key DESC, id DESC LIMIT ?),
            s AS MATERIALIZED (
                SELECT w.id, w.created_key,
                    row_number() OVER (ORDER BY w.created_key DESC, w.id DESC) - 1 AS pos,
                    (SELECT {score} FROM {table} t WHERE t.id = w.id) AS score
                FROM w)"""
    keyed_params = [*params, lo, hi, limit, *dims]
    if not admitted:  # the usual case: positions and the top k in SQL, as window_scan does
        return _regions(
            reader.execute(
                f"WITH {keyed}{_REGIONS}", [*keyed_params, *_region_params(limits)]
            ).fetchall()
        )
    candidates = [
        (int(r[1]), int(r[0]), r[3])
        for r in reader.execute(f"WITH {keyed} SELECT * FROM s", keyed_params).fetchall()
    ]
    for r in reader.execute(
        f"SELECT t.id, t.created_key, {score} FROM {table} t WHERE t.id = ANY(?)",
        [*dims, admitted],
    ).fetchall():
        candidates.append((int(r[1]), int(r[0]), r[2]))
    candidates.sort(reverse=True)
    ordered = candidates[:limit]  # window order: (created_key DESC, id DESC)

    def best(positions: range, keep: int) -> list[tuple[int, float]]:
        hits = [
            (-float(ordered[p][2]), p, ordered[p][1])
            for p in positions
            if ordered[p][2] is not None and float(ordered[p][2]) >= limits.threshold
        ]
        return [(i, -s) for s, _, i in sorted(hits)[: max(keep, 0)]]

    near_end = min(limits.window, len(ordered))
    far_hits = best(range(near_end, len(ordered)), limits.far_k) if limits.has_far else []
    return WindowHits(best(range(near_end), limits.k), far_hits)
