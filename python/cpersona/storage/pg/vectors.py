"""The vector arm on PostgreSQL: the scoped window scan of retrieval.md §4.2-4.3 in one query.

SQLite's path (storage/vectors.py `window_ids` + `blobs`, scored in Python) orders the window by
`COALESCE(CAST(strftime('%s', created_at) AS INTEGER), 0) DESC, id DESC`. PostgreSQL keeps that
key in a stored generated column `created_key` (`cpersona_time_key`, SQLite's date grammar
reimplemented), so the window is read from one btree in order and no row's key is computed at
query time (the function costs ~7 us a row: 70 ms for a 10,000-row window).

A row's score is pgvector's inner product, negated back: float32 products summed in float32 in
row order, widened to double. The Rust and numpy kernels sum in another order, so a score can
differ from theirs in the last float32 bits (docs/compatibility.md); positions, scopes, the
threshold rule and the (score DESC, position ASC) cut are the same.

The source filter reads a stored generated column `source_id` (`cpersona_source_id`, SQLite's
`json_extract(source, '$.id')` as text). A time-scoped scan (`span_scan`, issue 22) reads a
third, `instant_key` (`cpersona_instant_key`: the row's instant where SQL reads its stamp
exactly as Python does, else NULL and the row is timed in Python). Statements use SQLite's `?`
placeholders, as every storage statement does: the PostgreSQL database translates them
(PG-DESIGN.md "Backends").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from cpersona.models import ProjectFilter
from cpersona.storage.filters import project_where
from cpersona.timerange import TimeRange, row_time

if TYPE_CHECKING:
    from cpersona.storage.pg.db import PgDatabase

TABLES = ("memories", "episodes")

# Mirrors SQLite 3.40's date parser (date.c: parseYyyyMmDd, parseHhMmSs, parseTimezone,
# computeJD) and strftime('%s') for text: `[-]YYYY-MM-DD`, then any run of whitespace or `T`,
# then optionally `HH:MM[:SS[.fff...]]`, whitespace, `Z` or `+-HH:MM`, whitespace; or the time
# alone (on 2000-01-01). Day 1-31 of any month (Feb 31 = Mar 2, as SQLite counts), hour 0-24.
# A bare number is a Julian day number. What SQLite also reads and this does not: 'now' (keyed
# 0 here; cpersona never writes it). The canonical stamp takes a fast path without the regex.
TIME_KEY_FUNCTION = r"""
CREATE OR REPLACE FUNCTION cpersona_time_key(t text) RETURNS bigint
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $fn$
DECLARE
  m text[];
  y int; mo int; d int; h int := 0; mi int := 0; s float8 := 0; tz int := 0;
  a int; b int; jd bigint; timed boolean;
BEGIN
  IF t IS NULL THEN RETURN 0; END IF;
  IF t ~ '^[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2}$' THEN
    m := ARRAY['', substr(t, 1, 4), substr(t, 6, 2), substr(t, 9, 2), substr(t, 12, 2),
               substr(t, 15, 2), substr(t, 18, 2)];
  ELSE
    m := regexp_match(t, '^(-?)([0-9]{4})-([0-9]{2})-([0-9]{2})[ \t\n\v\f\rT]*'
      '(?:([0-9]{2}):([0-9]{2})(?::([0-9]{2})(?:\.([0-9]+))?)?[ \t\n\v\f\r]*'
      '(?:([Zz])|([+-])([0-9]{2}):([0-9]{2}))?[ \t\n\v\f\r]*)?$');
    IF m IS NULL THEN
      m := regexp_match(t, '^()()()()([0-9]{2}):([0-9]{2})(?::([0-9]{2})(?:\.([0-9]+))?)?'
        '[ \t\n\v\f\r]*(?:([Zz])|([+-])([0-9]{2}):([0-9]{2}))?[ \t\n\v\f\r]*$');
      IF m IS NULL THEN
        -- A bare number is a Julian day number (sqlite3AtoF, setRawDateNumber).
        IF t ~ '^[ \t\n\v\f\r]*[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?[ \t\n\v\f\r]*$'
        THEN
          s := t::float8;
          IF s >= 0 AND s < 5373484.5 THEN
            RETURN trunc(s * 86400000 + 0.5)::bigint / 1000 - 210866760000;
          END IF;
        END IF;
        RETURN 0;
      END IF;
      y := 2000; mo := 1; d := 1;
    END IF;
  END IF;
  IF y IS NULL THEN
    y := m[2]::int; mo := m[3]::int; d := m[4]::int;
    IF mo < 1 OR mo > 12 OR d < 1 OR d > 31 THEN RETURN 0; END IF;
    IF m[1] = '-' THEN y := -y; END IF;
  END IF;
  timed := m[5] IS NOT NULL;
  IF timed THEN
    h := m[5]::int; mi := m[6]::int;
    IF h > 24 OR mi > 59 THEN RETURN 0; END IF;
    IF m[7] IS NOT NULL THEN
      IF m[7]::int > 59 THEN RETURN 0; END IF;
      s := m[7]::int;
      IF m[8] IS NOT NULL THEN
        s := s + m[8]::float8 / power(10::float8, length(m[8]));
      END IF;
    END IF;
    IF m[10] IS NOT NULL THEN
      IF m[11]::int > 14 OR m[12]::int > 59 THEN RETURN 0; END IF;
      tz := (m[11]::int * 60 + m[12]::int) * CASE m[10] WHEN '-' THEN -1 ELSE 1 END;
    END IF;
  END IF;
  IF y < -4713 OR y > 9999 THEN RETURN 0; END IF;
  IF mo <= 2 THEN y := y - 1; mo := mo + 12; END IF;
  a := y / 100;
  b := 2 - a + a / 4;
  jd := ((36525 * (y + 4716)) / 100 + (306001 * (mo + 1)) / 10000 + d + b)::bigint * 86400000
        - 131716800000;
  IF timed THEN
    jd := jd + h * 3600000 + mi * 60000 + trunc(s * 1000 + 0.5)::bigint - tz * 60000::bigint;
  END IF;
  IF jd < 0 OR jd > 464269060799999 THEN RETURN 0; END IF;
  RETURN jd / 1000 - 210866760000;
END
$fn$
"""


# `CAST(json_extract(source, '$.id') AS TEXT)` behind `CASE WHEN json_valid(source)` (retrieval
# §4.0), as SQLite 3.40 answers it: the first `id` key of a JSON object; a string unescaped, an
# integer in canonical form, true/false as 1/0, null as NULL. Other numbers and nested values
# keep their JSON text as written (SQLite reformats them: 1.50 -> 1.5, [1, 2] -> [1,2]).
SOURCE_ID_FUNCTION = r"""
CREATE OR REPLACE FUNCTION cpersona_source_id(source text) RETURNS text
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $fn$
DECLARE
  j json; v json; kind text;
BEGIN
  IF source IS NULL OR NOT pg_input_is_valid(source, 'json') THEN RETURN NULL; END IF;
  j := source::json;
  IF json_typeof(j) <> 'object' THEN RETURN NULL; END IF;
  SELECT e.value INTO v FROM json_each(j) AS e WHERE e.key = 'id' LIMIT 1;
  kind := json_typeof(v);
  IF kind IS NULL OR kind = 'null' THEN RETURN NULL; END IF;
  IF kind = 'string' THEN RETURN v #>> '{}'; END IF;
  IF kind = 'boolean' THEN RETURN CASE WHEN v::text = 'true' THEN '1' ELSE '0' END; END IF;
  IF kind = 'number' AND v::text ~ '^-?[0-9]{1,18}$' THEN RETURN v::text::bigint::text; END IF;
  RETURN v::text;
END
$fn$
"""


# A row's instant (cpersona.timerange.row_time) where SQL can know it exactly: the stamp forms
# `YYYY-MM-DD` and `YYYY-MM-DD[T ]HH:MM[:SS[.f{1,6}]]` with `Z`, `+HH:MM`, `-HH:MM` or no offset
# (UTC), a valid calendar date, hour < 24, years 2-9998 (no offset can leave datetime's
# range), in microseconds since the Unix epoch: exactly what Python's fromisoformat reads from
# them. Anything else is NULL, and a time-scoped scan reads that row's instant in Python (its
# other stamp forms, then created_at): NULL is never wrong, only slower. Kept in a stored
# generated column, so every write path (2.5.x's too) keeps it current.
INSTANT_KEY_FUNCTION = r"""
CREATE OR REPLACE FUNCTION cpersona_instant_key(t text) RETURNS bigint
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $fn$
DECLARE
  m text[];
  y int; mo int; d int; h int := 0; mi int := 0; s int := 0; us bigint := 0; tz int := 0;
  last int;
BEGIN
  IF t IS NULL OR length(t) < 10 OR length(t) > 32 THEN RETURN NULL; END IF;
  m := regexp_match(t, '^([0-9]{4})-([0-9]{2})-([0-9]{2})(?:[T ]([0-9]{2}):([0-9]{2})'
    '(?::([0-9]{2})(?:\.([0-9]{1,6}))?)?(Z|[+-][0-9]{2}:[0-9]{2})?)?$');
  IF m IS NULL THEN RETURN NULL; END IF;
  y := m[1]::int; mo := m[2]::int; d := m[3]::int;
  IF y < 2 OR y > 9998 OR mo < 1 OR mo > 12 OR d < 1 THEN RETURN NULL; END IF;
  last := extract(day FROM make_date(y, mo, 1) + interval '1 month' - interval '1 day')::int;
  IF d > last THEN RETURN NULL; END IF;
  IF m[4] IS NOT NULL THEN
    h := m[4]::int; mi := m[5]::int;
    IF m[6] IS NOT NULL THEN s := m[6]::int; END IF;
    IF m[7] IS NOT NULL THEN us := rpad(m[7], 6, '0')::bigint; END IF;
    IF h > 23 OR mi > 59 OR s > 59 THEN RETURN NULL; END IF;
    IF m[8] IS NOT NULL AND m[8] <> 'Z' THEN
      IF substr(m[8], 2, 2)::int > 23 OR substr(m[8], 5, 2)::int > 59 THEN RETURN NULL; END IF;
      tz := (substr(m[8], 2, 2)::int * 60 + substr(m[8], 5, 2)::int)
            * CASE WHEN substr(m[8], 1, 1) = '-' THEN -1 ELSE 1 END;
    END IF;
  END IF;
  RETURN ((make_date(y, mo, d) - date '1970-01-01')::bigint * 86400
          + h * 3600 + mi * 60 + s - tz * 60) * 1000000 + us;
END
$fn$
"""


def schema_statements() -> list[str]:
    """DDL the PostgreSQL schema runs after creating `memories` and `episodes` (idempotent).

    The window index is partial (`embedding IS NOT NULL`): only embedded rows take window
    positions, so the scan walks the agent's embedded rows newest first and stops at the reach.
    No HNSW/IVFFlat index: an approximate index could change which rows a recall returns.
    """
    out = [TIME_KEY_FUNCTION, SOURCE_ID_FUNCTION, INSTANT_KEY_FUNCTION]
    for table in TABLES:
        out.append(
            f"ALTER TABLE {table} ADD COLUMN IF NOT EXISTS created_key bigint "
            "GENERATED ALWAYS AS (cpersona_time_key(created_at)) STORED"
        )
    for table, stamp in (("memories", "timestamp"), ("episodes", "start_time")):
        out.append(
            f"ALTER TABLE {table} ADD COLUMN IF NOT EXISTS instant_key bigint "
            f"GENERATED ALWAYS AS (cpersona_instant_key({stamp})) STORED"
        )
    # A column, not an expression in the query: its statistics let the planner see how many
    # rows a source prefix keeps (its guess for an expression, 0.5 %, made it sort the whole
    # agent instead of walking the window index).
    out.append(
        "ALTER TABLE memories ADD COLUMN IF NOT EXISTS source_id text "
        "GENERATED ALWAYS AS (cpersona_source_id(source)) STORED"
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


def _where(
    table: str, agent_id: str, project: ProjectFilter, channel: str, source_prefix: str
) -> tuple[str, list[object]]:
    parts = ["agent_id = ?", "embedding IS NOT NULL"]
    params: list[object] = [agent_id]
    pw, pp = project_where(project)
    parts.append(pw if pw != "1" else "TRUE")
    params.extend(pp)
    if channel:
        parts.append("channel IN (?, '')")
        params.append(channel)
    if source_prefix:
        if table != "memories":
            # Episodes carry no source: a source filter admits none of them.
            parts.append("FALSE")
        else:
            parts.append("source_id ^@ ?")
            params.append(source_prefix)
    return " AND ".join(parts), params


def window_scan(
    db: PgDatabase,
    table: str,
    query: bytes,
    agent_id: str,
    project: ProjectFilter,
    channel: str,
    source_prefix: str,
    *,
    window: int,
    reach: int,
    threshold: float,
    k: int,
    far_k: int,
) -> WindowHits:
    """The near list and the far list of one table, in one statement (module docstring)."""
    if table not in TABLES:
        raise ValueError(f"no vector scan for table {table!r}")
    vector = db.vector_param(query)
    if vector is None:  # empty, not whole float32s, or not finite: nothing can match it
        return WindowHits([], [])
    dim = len(vector.floats)
    far = reach > window
    span = max(window, reach) if far else window
    if span <= 0 or (k <= 0 and (not far or far_k <= 0)):
        return WindowHits([], [])
    where, params = _where(table, agent_id, project, channel, source_prefix)
    # One pass down the partial btree, newest first, stopped at `span`: row_number() over the
    # same order is each row's position, and each row is scored as it passes (nothing but
    # (id, pos, score) is kept). Foreign-width rows keep their position and score NULL
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
        )
        (SELECT 0 AS far, id, score, pos FROM s
         WHERE pos < ? AND score >= CAST(? AS double precision)
         ORDER BY score DESC, pos ASC LIMIT ?)
        UNION ALL
        (SELECT 1 AS far, id, score, pos FROM s
         WHERE pos >= ? AND score >= CAST(? AS double precision)
         ORDER BY score DESC, pos ASC LIMIT ?)
    """
    params = [dim, vector, *params, span]
    params += [window, float(threshold), max(k, 0)]
    params += [window, float(threshold), max(far_k, 0) if far else 0]
    regions: tuple[list[tuple[float, int, int]], list[tuple[float, int, int]]] = ([], [])
    for row in db.reader().execute(sql, params).fetchall():
        regions[int(row[0])].append((-float(row[2]), int(row[3]), int(row[1])))
    # UNION ALL keeps each branch's order in practice, but SQL does not promise it.
    near, far_list = (sorted(r) for r in regions)
    return WindowHits([(i, -s) for s, _, i in near], [(i, -s) for s, _, i in far_list])


def span_scan(
    db: PgDatabase,
    table: str,
    query: bytes,
    agent_id: str,
    project: ProjectFilter,
    channel: str,
    source_prefix: str,
    span: TimeRange,
    *,
    window: int,
    reach: int,
    threshold: float,
    k: int,
    far_k: int,
) -> WindowHits:
    """`window_scan` of a time-scoped scan: positions go to the rows whose instant `span`
    admits, in the same order (created_key DESC, id DESC).

    The rows whose stored `instant_key` is in the range come from its index (a past week is
    read as that week, not by walking every newer row), the newest `limit` of them; rows whose
    key is NULL (a stamp SQL cannot read exactly; rare) are read from their own partial index
    and their instant tested in Python (cpersona.timerange). The two are merged in window
    order, and only the first `limit` rows are scored."""
    if table not in TABLES:
        raise ValueError(f"no vector scan for table {table!r}")
    vector = db.vector_param(query)
    if vector is None:
        return WindowHits([], [])
    far = reach > window
    limit = max(window, reach) if far else window
    if limit <= 0 or (k <= 0 and (not far or far_k <= 0)):
        return WindowHits([], [])
    where, params = _where(table, agent_id, project, channel, source_prefix)
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
        cuts = [window, float(threshold), max(k, 0), window, float(threshold)]
        cuts.append(max(far_k, 0) if far else 0)
        found: tuple[list[tuple[float, int, int]], list[tuple[float, int, int]]] = ([], [])
        for row in reader.execute(
            f"""WITH {keyed}
                (SELECT 0 AS far, id, score, pos FROM s
                 WHERE pos < ? AND score >= CAST(? AS double precision)
                 ORDER BY score DESC, pos ASC LIMIT ?)
                UNION ALL
                (SELECT 1 AS far, id, score, pos FROM s
                 WHERE pos >= ? AND score >= CAST(? AS double precision)
                 ORDER BY score DESC, pos ASC LIMIT ?)""",
            [*keyed_params, *cuts],
        ).fetchall():
            found[int(row[0])].append((-float(row[2]), int(row[3]), int(row[1])))
        near, far_list = (sorted(f) for f in found)
        return WindowHits([(i, -s) for s, _, i in near], [(i, -s) for s, _, i in far_list])
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
            if ordered[p][2] is not None and float(ordered[p][2]) >= threshold
        ]
        return [(i, -s) for s, _, i in sorted(hits)[: max(keep, 0)]]

    near_end = min(window, len(ordered))
    far_hits = best(range(near_end, len(ordered)), far_k) if far else []
    return WindowHits(best(range(near_end), k), far_hits)
