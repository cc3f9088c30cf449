"""TEMPORARY (issue 18): the SQLite functions that only storage/health.py, storage/portability.py
and storage/transfer.py still call on PostgreSQL (through storage/pg/legacy.py), until their
rewrite in portable SQL is merged; then this module is deleted and a migration drops them
(`LEGACY_DROP`, the names `DROP ... IF EXISTS` needs). Nothing else uses them: the storage
SQL of every other module is portable (storage/ops.py), and `pg_0002_native` drops every
other emulation. They answer with SQLite's semantics (see the old storage/pg/compat.py in
git history for the date grammar they follow).
"""

from __future__ import annotations

#: Statements creating the temporary functions and the catalogue view. Idempotent.
FUNCTIONS: tuple[str, ...] = (
    # SQLite's reading of a time string: {iJD (ms since the Julian epoch), Y, M, D, h, m, s}.
    # The fields are the ones written unless a non-zero zone offset moved the instant (SQLite
    # then shows the normalised UTC time); a number (a Julian day) and 'now' carry fields
    # computed from the instant. NULL when SQLite cannot read it.
    r"""CREATE OR REPLACE FUNCTION sqlite_time(t text) RETURNS numeric[]
LANGUAGE plpgsql STABLE PARALLEL SAFE AS $fn$
DECLARE
    m text[];
    y int; mo int; d int; h int := 0; mi int := 0; s numeric := 0;
    yy int; mm int; a int; b int; x1 bigint; x2 bigint; jd bigint; tz int := 0;
    ts timestamp;
BEGIN
    IF t IS NULL THEN RETURN NULL; END IF;
    -- SQLite reads 'now' exactly, a number with spaces around it, a date with trailing
    -- spaces only (' 2024-01-01' is NULL there).
    IF lower(t) = 'now' THEN
        jd := round(extract(epoch FROM statement_timestamp()) * 1000)::bigint + 210866760000000;
    ELSIF btrim(t, E' \t\n\r\f\v') ~ '^[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?$' THEN
        t := btrim(t, E' \t\n\r\f\v');
        IF t::double precision < 0 OR t::double precision > 5373484.5 THEN RETURN NULL; END IF;
        jd := (t::double precision * 86400000.0 + 0.5)::bigint;
    ELSE
        t := rtrim(t, E' \t\n\r\f\v');
        m := regexp_match(t,
            '^(?:([0-9]{4})-([0-9]{2})-([0-9]{2}))?(?:[\sT]*([0-9]{2}):([0-9]{2})'
            '(?::([0-9]{2}(?:\.[0-9]+)?))?)?\s*(?:([Zz])|([+-])([0-9]{2}):([0-9]{2}))?$');
        IF m IS NULL OR (m[1] IS NULL AND m[4] IS NULL) THEN RETURN NULL; END IF;
        IF m[1] IS NULL AND t !~ '^[0-9]{2}:' THEN RETURN NULL; END IF;
        IF m[1] IS NOT NULL AND m[4] IS NULL
           AND t !~ '^[0-9]{4}-[0-9]{2}-[0-9]{2}\s*([Zz]|[+-][0-9]{2}:[0-9]{2})?$' THEN
            RETURN NULL;
        END IF;
        IF m[1] IS NULL THEN
            y := 2000; mo := 1; d := 1;
        ELSE
            y := m[1]::int; mo := m[2]::int; d := m[3]::int;
            IF mo < 1 OR mo > 12 OR d < 1 OR d > 31 THEN RETURN NULL; END IF;
        END IF;
        IF m[4] IS NOT NULL THEN
            h := m[4]::int; mi := m[5]::int;
            IF m[6] IS NOT NULL THEN s := m[6]::numeric; END IF;
            IF h > 24 OR mi > 59 OR s >= 60 THEN RETURN NULL; END IF;
        END IF;
        IF m[8] IS NOT NULL THEN
            IF m[9]::int > 14 OR m[10]::int > 59 THEN RETURN NULL; END IF;
            tz := (m[9]::int * 60 + m[10]::int) * (CASE WHEN m[8] = '-' THEN -1 ELSE 1 END);
        END IF;
        yy := y; mm := mo;
        IF mm <= 2 THEN yy := yy - 1; mm := mm + 12; END IF;
        a := (yy + 4800) / 100;
        b := 38 - a + (a / 4);
        x1 := 36525 * (yy + 4716) / 100;
        x2 := 306001 * (mm + 1) / 10000;
        jd := ((x1 + x2 + d + b - 1524.5) * 86400000)::bigint;
        jd := jd + h * 3600000 + mi * 60000 + round(s * 1000)::bigint - tz * 60000;
        IF tz = 0 THEN
            RETURN ARRAY[jd, y, mo, d, h, mi, s];
        END IF;
    END IF;
    ts := timestamp '1970-01-01 00:00:00' + (jd - 210866760000000) * interval '1 millisecond';
    -- PostgreSQL numbers years BC without a year 0 (4714 BC is -4714); SQLite counts
    -- astronomically (-4713).
    RETURN ARRAY[jd, CASE WHEN extract(year FROM ts) < 0 THEN extract(year FROM ts) + 1
                          ELSE extract(year FROM ts) END,
                 extract(month FROM ts), extract(day FROM ts),
                 extract(hour FROM ts), extract(minute FROM ts),
                 (jd % 60000) / 1000.0];
END
$fn$""",
    """CREATE OR REPLACE FUNCTION julianday(t text) RETURNS double precision
LANGUAGE sql STABLE PARALLEL SAFE AS $fn$
SELECT ((sqlite_time(t))[1]::bigint / 86400000.0)::double precision $fn$""",
    # strftime's substitutions as SQLite documents them (%d %f %H %j %m %M %s %S %w %Y %%).
    r"""CREATE OR REPLACE FUNCTION strftime(fmt text, t text) RETURNS text
LANGUAGE plpgsql STABLE PARALLEL SAFE AS $fn$
DECLARE
    f numeric[] := sqlite_time(t);
    jd bigint;
    out text := '';
    i int := 1;
    c text;
BEGIN
    IF f IS NULL OR fmt IS NULL THEN RETURN NULL; END IF;
    jd := f[1]::bigint;
    WHILE i <= length(fmt) LOOP
        c := substr(fmt, i, 1);
        IF c <> '%' OR i = length(fmt) THEN
            out := out || c;
            i := i + 1;
            CONTINUE;
        END IF;
        c := substr(fmt, i + 1, 1);
        out := out || CASE c
            WHEN 'd' THEN lpad(f[4]::int::text, 2, '0')
            WHEN 'f' THEN to_char(least(trunc(f[7], 3), 59.999), 'FM00.000')
            WHEN 'H' THEN lpad(f[5]::int::text, 2, '0')
            WHEN 'j' THEN lpad(((jd - (sqlite_time(lpad(f[2]::int::text, 4, '0')
                                                   || '-01-01'))[1]::bigint)
                               / 86400000 + 1)::text, 3, '0')
            WHEN 'm' THEN lpad(f[3]::int::text, 2, '0')
            WHEN 'M' THEN lpad(f[6]::int::text, 2, '0')
            WHEN 's' THEN (jd / 1000 - 210866760000)::text
            WHEN 'S' THEN lpad(trunc(f[7])::int::text, 2, '0')
            WHEN 'w' THEN (((jd + 129600000) / 86400000) % 7)::text
            -- printf's %04d: four digits at least, never cut (lpad cuts), the sign counted
            WHEN 'Y' THEN CASE WHEN f[2]::int < 0
                THEN '-' || lpad((-f[2]::int)::text, greatest(3, length((-f[2]::int)::text)), '0')
                ELSE lpad(f[2]::int::text, greatest(4, length(f[2]::int::text)), '0') END
            WHEN '%' THEN '%'
            ELSE NULL
        END;
        IF out IS NULL THEN RETURN NULL; END IF;
        i := i + 2;
    END LOOP;
    RETURN out;
END
$fn$""",
    # datetime(t, modifier, ...) for SQLite's '[+-]N days|hours|minutes|seconds' modifiers
    # (the result is the moved instant in UTC); any other modifier gives NULL.
    r"""CREATE OR REPLACE FUNCTION datetime(t text, VARIADIC mods text[]) RETURNS text
LANGUAGE plpgsql STABLE PARALLEL SAFE AS $fn$
DECLARE
    jd bigint := (sqlite_time(t))[1]::bigint;
    mod text;
    m text[];
BEGIN
    IF jd IS NULL THEN RETURN NULL; END IF;
    FOREACH mod IN ARRAY mods LOOP
        m := regexp_match(lower(btrim(mod)),
                          '^([+-]?[0-9]+(?:\.[0-9]*)?)\s+(day|hour|minute|second)s?$');
        IF m IS NULL THEN RETURN NULL; END IF;
        jd := jd + round(m[1]::numeric * CASE m[2] WHEN 'day' THEN 86400000
            WHEN 'hour' THEN 3600000 WHEN 'minute' THEN 60000 ELSE 1000 END)::bigint;
    END LOOP;
    RETURN datetime(((jd / 86400000.0)::numeric(20, 10))::text);
END
$fn$""",
    """CREATE OR REPLACE FUNCTION datetime(t text) RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE AS $fn$ SELECT strftime('%Y-%m-%d %H:%M:%S', t) $fn$""",
    """CREATE OR REPLACE FUNCTION json_valid(t text) RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $fn$
SELECT CASE WHEN t IS NULL THEN NULL WHEN t IS JSON THEN 1 ELSE 0 END $fn$""",
    # A JSON path of SQLite's form ($, $.key, $."key", $[n], chained) as a #> path array.
    r"""CREATE OR REPLACE FUNCTION sqlite_json_path(path text) RETURNS text[]
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $fn$
DECLARE
    rest text;
    parts text[] := '{}';
    m text[];
BEGIN
    IF path IS NULL OR left(path, 1) <> '$' THEN
        RAISE EXCEPTION 'JSON path error near ''%''', path;
    END IF;
    rest := substr(path, 2);
    WHILE rest <> '' LOOP
        m := regexp_match(rest, '^\.("([^"]*)"|([^.\[]+))');
        IF m IS NOT NULL THEN
            parts := parts || coalesce(m[2], m[3]);
            rest := substr(rest, length(m[1]) + 2);
            CONTINUE;
        END IF;
        m := regexp_match(rest, '^\[([0-9]+)\]');
        IF m IS NOT NULL THEN
            parts := parts || m[1];
            rest := substr(rest, length(m[1]) + 3);
            CONTINUE;
        END IF;
        RAISE EXCEPTION 'JSON path error near ''%''', rest;
    END LOOP;
    RETURN parts;
END
$fn$""",
    # SQLite's value of a JSON node: strings unquoted, numbers as written, true/false as 1/0,
    # null as NULL, objects and arrays as their JSON text.
    """CREATE OR REPLACE FUNCTION sqlite_json_value(v json) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $fn$
SELECT CASE json_typeof(v)
    WHEN 'string' THEN v #>> '{}'
    WHEN 'boolean' THEN CASE WHEN v::text = 'true' THEN '1' ELSE '0' END
    WHEN 'null' THEN NULL
    ELSE v::text
END $fn$""",
    # JSON whose \u0000 escape PostgreSQL text cannot hold reads as NULL (docs/compatibility.md).
    """CREATE OR REPLACE FUNCTION json_extract(t text, path text) RETURNS text
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $fn$
BEGIN
    RETURN sqlite_json_value(t::json #> sqlite_json_path(path));
EXCEPTION WHEN untranslatable_character THEN
    RETURN NULL;
END $fn$""",
    """CREATE OR REPLACE FUNCTION sqlite_json_type(v json) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $fn$
SELECT CASE json_typeof(v)
    WHEN 'string' THEN 'text'
    WHEN 'number' THEN CASE WHEN v::text ~ '^-?[0-9]+$' THEN 'integer' ELSE 'real' END
    WHEN 'boolean' THEN v::text
    ELSE json_typeof(v)
END $fn$""",
    """CREATE OR REPLACE FUNCTION json_type(t text) RETURNS text
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $fn$
BEGIN
    RETURN sqlite_json_type(t::json);
EXCEPTION WHEN untranslatable_character THEN
    RETURN NULL;
END $fn$""",
    """CREATE OR REPLACE FUNCTION json_type(t text, path text) RETURNS text
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $fn$
BEGIN
    RETURN sqlite_json_type(t::json #> sqlite_json_path(path));
EXCEPTION WHEN untranslatable_character THEN
    RETURN NULL;
END $fn$""",
    """CREATE OR REPLACE FUNCTION instr(a text, b text) RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $fn$ SELECT strpos(a, b) $fn$""",
    # A GLOB pattern as an anchored regular expression (* ? [...] [^...], the rest literal).
    r"""CREATE OR REPLACE FUNCTION sqlite_glob(pattern text) RETURNS text
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $fn$
DECLARE
    out text := '^';
    i int := 1;
    n int := length(pattern);
    c text;
    j int;
    cls text;
BEGIN
    IF pattern IS NULL THEN RETURN NULL; END IF;
    WHILE i <= n LOOP
        c := substr(pattern, i, 1);
        IF c = '*' THEN
            out := out || '.*';
        ELSIF c = '?' THEN
            out := out || '.';
        ELSIF c = '[' THEN
            j := i + 1;
            IF substr(pattern, j, 1) = '^' THEN j := j + 1; END IF;
            IF substr(pattern, j, 1) = ']' THEN j := j + 1; END IF;
            WHILE j <= n AND substr(pattern, j, 1) <> ']' LOOP j := j + 1; END LOOP;
            IF j > n THEN
                RETURN '(?!)';  -- an unclosed class matches nothing in SQLite
            END IF;
            cls := substr(pattern, i + 1, j - i - 1);
            IF left(cls, 1) = '^' THEN
                out := out || '[^' || replace(replace(substr(cls, 2), '\', '\\'), '[', '\[') || ']';
            ELSE
                out := out || '[' || replace(replace(cls, '\', '\\'), '[', '\[') || ']';
            END IF;
            i := j;
        ELSE
            out := out || regexp_replace(c, '([^A-Za-z0-9_])', '\\\1');
        END IF;
        i := i + 1;
    END LOOP;
    RETURN out || '$';
END
$fn$""",
    # length() of a vector in bytes, as SQLite's length() of the float32 BLOB it replaces.
    """CREATE OR REPLACE FUNCTION length(v vector) RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $fn$ SELECT vector_dims(v) * 4 $fn$""",
    # The catalogue rows storage code asks SQLite's sqlite_master about (existence checks).
    """CREATE OR REPLACE VIEW sqlite_master AS
SELECT CASE c.relkind WHEN 'v' THEN 'view' ELSE 'table' END::text AS type,
       c.relname::text AS name, c.relname::text AS tbl_name, NULL::text AS sql
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p', 'v')
UNION ALL
SELECT 'index', indexname::text, tablename::text, indexdef::text
  FROM pg_indexes WHERE schemaname = current_schema()
UNION ALL
SELECT 'trigger', t.tgname::text, c.relname::text, pg_get_triggerdef(t.oid)
  FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
  JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = current_schema() AND NOT t.tgisinternal""",
)

#: What dropping them takes (a migration after the three modules' rewrite is merged).
LEGACY_DROP: tuple[str, ...] = (
    "DROP VIEW IF EXISTS sqlite_master",
    "DROP FUNCTION IF EXISTS length(vector)",
    "DROP FUNCTION IF EXISTS sqlite_glob(text)",
    "DROP FUNCTION IF EXISTS instr(text, text)",
    "DROP FUNCTION IF EXISTS json_type(text, text)",
    "DROP FUNCTION IF EXISTS json_type(text)",
    "DROP FUNCTION IF EXISTS sqlite_json_type(json)",
    "DROP FUNCTION IF EXISTS json_extract(text, text)",
    "DROP FUNCTION IF EXISTS sqlite_json_value(json)",
    "DROP FUNCTION IF EXISTS sqlite_json_path(text)",
    "DROP FUNCTION IF EXISTS json_valid(text)",
    "DROP FUNCTION IF EXISTS datetime(text)",
    "DROP FUNCTION IF EXISTS datetime(text, text[])",
    "DROP FUNCTION IF EXISTS strftime(text, text)",
    "DROP FUNCTION IF EXISTS julianday(text)",
    "DROP FUNCTION IF EXISTS sqlite_time(text)",
)
