"""What PostgreSQL was doing during a benchmark run: commits, WAL flushes and what its busy
backends waited on (benches/throughput.py says from these what saturated).

Two kinds of figures, both read from the server's statistics views by a connection of its own:

- counters before and after the run: transactions committed (`pg_stat_database`: every
  autocommit read is one), WAL fsyncs and the milliseconds they took (`pg_stat_io`, object
  `wal`; the times need `track_wal_io_timing`, which `enable_timing` turns on for the bench's
  private server);
- a sample of `pg_stat_activity` every `PERIOD` seconds on a thread: for each backend running
  a statement, its wait event (none: it was on a CPU, or waiting for one). The shares say where
  the backends' time went: `CPU` (PostgreSQL's cores), `IO:WalSync` (fsync), `Lock:advisory` /
  `Lock:transactionid` (locks), `LWLock:*` (contended shared memory), `Client:*` (the backend
  waiting for the next message of its server, i.e. not PostgreSQL's time at all).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

#: Seconds between two samples of pg_stat_activity.
PERIOD = 0.02
#: Seconds before and after a run before the counters are read (see `_Run.__exit__`).
FLUSH_WAIT = 11.0

_COUNTERS = """
SELECT (SELECT sum(xact_commit) FROM pg_stat_database),
       (SELECT coalesce(sum(fsyncs), 0) FROM pg_stat_io WHERE object = 'wal'),
       (SELECT coalesce(sum(fsync_time), 0) FROM pg_stat_io WHERE object = 'wal'),
       (SELECT wal_bytes FROM pg_stat_wal)
"""

_ACTIVE = """
SELECT coalesce(wait_event_type || ':' || wait_event, 'CPU')
FROM pg_stat_activity
WHERE state = 'active' AND backend_type = 'client backend' AND pid <> pg_backend_pid()
"""


def enable_timing(url: str) -> dict[str, str]:
    """Turn on `track_wal_io_timing` (a reload, no restart) and return the settings that
    decide what a commit costs: fsync, synchronous_commit, wal_sync_method, shared_buffers."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("ALTER SYSTEM SET track_wal_io_timing = on")
        conn.execute("SELECT pg_reload_conf()")
        names = ("fsync", "synchronous_commit", "wal_sync_method", "shared_buffers")
        rows = conn.execute(
            "SELECT name, setting || coalesce(unit, '') FROM pg_settings WHERE name = ANY(%s)",
            [list(names)],
        ).fetchall()
    return {str(name): str(value) for name, value in rows}


@dataclass
class PgFigures:
    """One run's figures (see the module docstring)."""

    commits: int = 0
    fsyncs: int = 0
    fsync_ms: float = 0.0
    wal_bytes: int = 0
    waits: Counter[str] = field(default_factory=Counter)

    def shares(self) -> dict[str, float]:
        """Each wait event's share of the busy-backend samples, largest first."""
        total = sum(self.waits.values())
        return {k: v / total for k, v in self.waits.most_common()} if total else {}

    def summary(self, wall: float, calls: int) -> str:
        """One line: transactions/s (every autocommit read counts as one), WAL fsyncs per
        call, the fsync share of the run's time, and the busy backends' wait shares."""
        shares = ", ".join(f"{k} {v:.0%}" for k, v in list(self.shares().items())[:4])
        samples = max(1, round(wall / PERIOD))
        busy = sum(self.waits.values()) / samples
        return (
            f"{self.commits / wall:.0f} transactions/s, {self.fsyncs / max(1, calls):.2f} WAL "
            f"fsyncs per call, fsync {100 * self.fsync_ms / 1000 / wall:.0f} % of the run, "
            f"{busy:.2f} busy backends on average ({shares or 'none'})"
        )


class PgProbe:
    """Samples one PostgreSQL during a run (`with probe.run() as figures:`)."""

    def __init__(self, url: str) -> None:
        self.url = url

    def _counters(self, conn: Any) -> tuple[int, int, float, int]:
        row = conn.execute(_COUNTERS).fetchone()
        return int(row[0] or 0), int(row[1] or 0), float(row[2] or 0.0), int(row[3] or 0)

    def run(self) -> _Run:
        return _Run(self)


class _Run:
    def __init__(self, probe: PgProbe) -> None:
        import psycopg

        self._conn = psycopg.connect(probe.url, autocommit=True)
        self._probe = probe
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, name="pg-probe", daemon=True)
        self.figures = PgFigures()
        self._before = (0, 0, 0.0, 0)
        self._samples = 0  # each is a transaction of its own: not the run's commits

    def _sample(self) -> None:
        import psycopg

        with psycopg.connect(self._probe.url, autocommit=True) as conn:
            while not self._stop.is_set():
                for (event,) in conn.execute(_ACTIVE).fetchall():
                    self.figures.waits[str(event)] += 1
                self._samples += 1
                time.sleep(PERIOD)

    def __enter__(self) -> PgFigures:
        time.sleep(FLUSH_WAIT)  # what ran before (the warm-up) reaches the counters first
        self._before = self._probe._counters(self._conn)
        self._thread.start()
        return self.figures

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        # A backend flushes its statistics at most once a second at a transaction's end, and
        # an idle one within 10 s (PGSTAT_IDLE_INTERVAL): wait for the servers' idle pooled
        # connections before reading the after-figures.
        time.sleep(FLUSH_WAIT)
        after = self._probe._counters(self._conn)
        self._conn.close()
        commits, fsyncs, fsync_ms, wal = (a - b for a, b in zip(after, self._before, strict=True))
        self.figures.commits = int(commits) - self._samples - 1  # the samples, the before-read
        self.figures.fsyncs = int(fsyncs)
        self.figures.fsync_ms, self.figures.wal_bytes = float(fsync_ms), int(wal)
