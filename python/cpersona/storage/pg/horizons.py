"""Change-log positions on PostgreSQL: transaction horizons, so that no entry is skipped when
writers commit out of seq order.

Each log row records the transaction that wrote it (`xid`, pg_0006_log_xid). A read in one
snapshot S delivers the entries with `xid >= h` (h: the caller's horizon) and hands out
`xmin(S)` as the next horizon: every transaction below xmin(S) had finished when S was taken,
so all of its entries were in this read. An entry of a transaction at or above xmin(S) (still
running then, or committed beside one that was) is read again by the next read, until the
horizon passes it: a row id may come more than once, which is harmless because applying one
re-reads the row's current state.

The ints handed out (`applied_seq` in the index files, the `Changes.max_seq` of storage/
change_log.py) encode the horizon so that the index code's comparisons keep their meaning:

    OFFSET + 4 * horizon + c

- c = 2: a read (or `now`) of a snapshot with no transaction in progress below its xmax
  (xmin = xmax). PostgreSQL's xmax is one past the latest finished xid, so a later snapshot
  has the same xmin = xmax only if no transaction has finished since: nothing new to read.
- c = 0: a read while some transaction below xmax was in progress: below every value `now`
  can answer later, so the follower reads again next time (that transaction, or one beside
  it, may have committed since, and the horizon alone would not show it);
- c = 3: `now` while some transaction below xmax is in progress: above every position
  handed out so far, never equal to a read's.

So `now() == position` only when nothing was written since that (quiet) read; `position >
now()` only for a file from another database history; and a rebuild that starts from `now()`
misses nothing (it decodes to xmin, at or below every transaction still running).

Positions below OFFSET are seqs (index files written before pg_0006, when one global write
lock made seqs commit in order): read from them with `seq > s`, which is exact for a file that
release wrote, and the read hands out a horizon. Nothing is rebuilt on upgrade.
"""

from __future__ import annotations

from cpersona.storage.interface import Connection
from cpersona.storage.pg.snapshot_reads import remembered

#: Where horizons start: above any seq a log has handed out (a bigint sequence from 1).
OFFSET = 1 << 60
#: The snapshot's bounds as decimal text (xid8 has no cast to bigint), read from
#: `SNAPSHOT_FROM` (also by storage/change_log.py, beside the entries).
BOUNDS_COLUMNS = "pg_snapshot_xmin(s)::text, pg_snapshot_xmax(s)::text"
SNAPSHOT_FROM = "(SELECT pg_current_snapshot() AS s) AS q"
_BOUNDS = f"SELECT {BOUNDS_COLUMNS} FROM {SNAPSHOT_FROM}"


def _bounds(conn: Connection) -> tuple[int, int]:
    # Inside a REPEATABLE READ transaction pg_current_snapshot() is that transaction's
    # snapshot, the same at every ask: a recall syncs four index files in one (two logs, two
    # tables), and asked the server four times (CPERSONA_SQL_TRACE); now it rides with BEGIN.
    row = remembered(conn, "bounds", _BOUNDS)[0]
    return int(row[0]), int(row[1])


def encode(horizon: int, c: int) -> int:
    return OFFSET + 4 * horizon + c


def decode(position: int) -> int | None:
    """The horizon of `position`, or None for a seq (a pre-pg_0006 file's position)."""
    return None if position < OFFSET else (position - OFFSET) // 4


def position_of(xmin: int, xmax: int) -> int:
    """The position a read in a snapshot of these bounds hands out."""
    return encode(xmin, 2 if xmin == xmax else 0)


def now(conn: Connection) -> int:
    """The log's current mark (`max_seq`): see the module docstring."""
    xmin, xmax = _bounds(conn)
    return encode(xmin, 2 if xmin == xmax else 3)


def entries_after(seq: int) -> tuple[str, tuple[object, ...]]:
    """The WHERE condition (and parameters) of the entries a follower at `seq` has not
    applied."""
    horizon = decode(seq)
    if horizon is None:
        return "seq > ?", (seq,)
    return "xid >= CAST(? AS xid8)", (str(horizon),)


#: Seconds a change-log entry is kept after it was written, whoever has applied it: each host
#: keeps its own index files, and a trim by one host must not take entries from another that
#: is merely a little behind (it would have to rebuild). A host whose index has not synced for
#: longer is told its entries are lost and rebuilds.
RETAIN_SECONDS = 600


def trim_statement(log: str, upto: int) -> tuple[str, tuple[object, ...]]:
    """The DELETE of a trim by a follower at `upto` (RETURNING each deleted entry's xid as
    text, or NULL for a seq trim): entries below its horizon and older than RETAIN_SECONDS."""
    horizon = decode(upto)
    if horizon is None:  # a follower still at a seq (pre-pg_0006 file): by seq, as then
        return f"DELETE FROM {log} WHERE tbl = ? AND seq <= ? RETURNING NULL", (upto,)
    return (
        f"DELETE FROM {log} WHERE tbl = ? AND xid < CAST(? AS xid8) AND logged_at < "
        f"statement_timestamp() - interval '{int(RETAIN_SECONDS)} seconds' RETURNING xid::text",
        (str(horizon),),
    )


def trim_mark(upto: int, deleted: list[str | None]) -> int | None:
    """The mark a trim leaves: a follower below it may have needed a deleted entry. By xid:
    one past the largest deleted xid (a follower whose horizon is above every deleted entry
    lost nothing); None when nothing was deleted."""
    if decode(upto) is None:
        return upto if deleted else None
    xids = [int(x) for x in deleted if x is not None]
    return encode(max(xids) + 1, 0) if xids else None
