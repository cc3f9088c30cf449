"""`cpersona reembed`: convert a database's vectors to the configured model, in place.

The old vectors keep serving until the end. New vectors are computed in batches and staged
beside the rows (`cpersona_reembed_vectors`), each batch in its own transaction, so a run
killed at any point loses at most the batch it was computing and the next run continues from
the rows not staged yet. When every row with text has its new vector, one transaction swaps
them into every table being converted and records the new model (the cut-over): a reader sees
either all old vectors or all new ones, never a mix. Then the vector index files are rebuilt
and verified and calibration is rerun; the conversion's row is removed only after that, so a
run killed during the finish repeats only the finish.

Rows written by other processes while this runs get the old model's vector (that is what the
table holds until the cut-over); the cut-over is only taken when, inside its transaction, no
row is left without a staged vector, so they are converted too. A staged vector is dropped by
a trigger when its row's text changes or the row is deleted.

Exit codes: 0 converted (or nothing to do; `--dry-run` always), 1 another conversion of this
database is running, 2 the database or the configured model cannot be used.
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

import numpy as np

from cpersona.config import Settings
from cpersona.embedding.cache import CachedProvider
from cpersona.embedding.conversion_lock import exclusive
from cpersona.errors import EmbeddingUnavailable
from cpersona.storage import vector_models as vm
from cpersona.storage.calibration import embedded_agents

if TYPE_CHECKING:
    from cpersona.engine import Engine

#: Rows embedded and committed together (the most a kill can cost).
DEFAULT_BATCH = 64
#: Rows timed by `--dry-run` to estimate the rate.
SAMPLE_ROWS = 16
#: Rounds of "embed the rows written meanwhile, then try the cut-over again" before the last
#: round embeds the remainder under the write lock.
CUTOVER_ROUNDS = 5


def _duration(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "?"
    seconds = max(0, round(seconds))
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    if seconds >= 60:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds}s"


class Progress:
    """One line on stderr: rows done / total, rate, time left (redrawn in place on a tty)."""

    def __init__(self, out: TextIO, table: str, done: int, total: int) -> None:
        self.out = out
        self.table = table
        self.total = total
        self.start_done = done
        self.done = done
        self.started = time.monotonic()
        self._last = 0.0
        self._tty = out.isatty()

    def update(self, done: int, *, final: bool = False) -> None:
        self.done = done
        now = time.monotonic()
        if not final and now - self._last < 1.0 and self._tty:
            return
        self._last = now
        elapsed = now - self.started
        rate = (done - self.start_done) / elapsed if elapsed > 0 else 0.0
        left = (self.total - done) / rate if rate > 0 else math.inf
        pct = 100.0 * done / self.total if self.total else 100.0
        line = (
            f"reembed {self.table}: {done}/{self.total} rows ({pct:.0f}%), "
            f"{rate:.1f} rows/s, {_duration(left)} left"
        )
        if self._tty:
            print(f"\r{line}\x1b[K", end="\n" if final else "", file=self.out, flush=True)
        else:
            print(line, file=self.out, flush=True)


@dataclass
class Plan:
    """What a run converts: per table, rows already staged and rows to convert."""

    target: str
    tables: dict[str, tuple[int, int]]

    @property
    def todo(self) -> int:
        return sum(total - done for done, total in self.tables.values())


def _blobs(provider: CachedProvider, texts: list[str]) -> list[bytes | None]:
    rows = np.asarray(provider.embed(texts, kind="passage"), dtype=np.float32)
    return [
        r.astype("<f4").tobytes() if r.size and bool(np.all(np.isfinite(r))) else None for r in rows
    ]


class Converter:
    """Converts one engine's database to its configured model (see the module docstring)."""

    def __init__(
        self, engine: Engine, out: TextIO = sys.stderr, batch: int = DEFAULT_BATCH
    ) -> None:
        self.engine = engine
        self.db = engine.db
        self.target: CachedProvider = engine.embedder
        self.out = out
        self.batch = max(1, batch)

    def say(self, text: str) -> None:
        print(f"reembed: {text}", file=self.out, flush=True)

    def plan(self) -> Plan:
        """Tables whose vectors are not the target's, or whose conversion is open."""
        record, open_ = vm.read(self.db)
        tables = {}
        for table in vm.TABLES:
            stored = record.get(table)
            converting = open_.get(table)
            if converting is not None and converting.model == self.target.name:
                tables[table] = vm.table_progress(self.db, table)
            elif stored is not None and stored.model != self.target.name:
                _, total = vm.table_progress(self.db, table)
                tables[table] = (0, total)
        return Plan(self.target.name, tables)

    def estimate(self, plan: Plan) -> float:
        """Seconds per row of the target model, timed on a sample of the rows to convert."""
        texts = [t for table in plan.tables for _, t in vm.unstaged_rows(self.db, table, 8)]
        texts = texts[:SAMPLE_ROWS]
        if not texts:
            return 0.0
        _blobs(self.target, texts[:1])  # the model load is not a per-row cost
        started = time.perf_counter()
        _blobs(self.target, texts)
        return (time.perf_counter() - started) / len(texts)

    def run(self) -> int:
        self._drop_stale()
        plan = self.plan()
        if not plan.tables:
            self.say(f"nothing to convert: every stored vector is {self.target.name}'s")
            return 0
        vm.begin_all(self.db, list(plan.tables), self.target.name)
        started = time.monotonic()
        converting = vm.open_conversions(self.db)
        staging = [t for t in plan.tables if converting[t].phase == "staging"]
        for table in staging:
            self._stage(table)
        if staging:
            self._cut_over(staging)
        self._finish(list(plan.tables))
        self.say(f"done in {_duration(time.monotonic() - started)}")
        return 0

    def _drop_stale(self) -> None:
        """Forget a conversion towards another model than the target (the configuration
        changed since it began): its staged vectors are of no use now."""
        for conv in vm.drop_stale(self.db, self.target.name):
            self.say(f"dropping the unfinished conversion of {conv.table} to {conv.model}")

    def _stage(self, table: str) -> None:
        done, total = vm.table_progress(self.db, table)
        if done:
            self.say(f"resuming {table}: {done} of {total} rows already converted")
        bar = Progress(self.out, table, done, total)
        bar.update(done, final=done >= total)
        while True:
            rows = vm.unstaged_rows(self.db, table, self.batch)
            if not rows:
                break
            vm.stage_rows(self.db, table, self._embed(table, rows))
            done, total = vm.table_progress(self.db, table)
            bar.total = total
            bar.update(done, final=done >= total)

    def _embed(self, table: str, rows: list[tuple[int, str]]) -> list[tuple[int, str, bytes]]:
        """The new vectors of (id, text) rows; no text may fail (see below)."""
        blobs = _blobs(self.target, [text for _, text in rows])
        staged = [(i, t, b) for (i, t), b in zip(rows, blobs, strict=True) if b is not None]
        if len(staged) < len(rows):
            # A text the model cannot embed would block the cut-over forever; it keeps no
            # vector under the new model (as a failed store does) and is reported.
            raise EmbeddingUnavailable(
                f"{len(rows) - len(staged)} {table} rows gave no usable vector"
            )
        return staged

    def _cut_over(self, tables: list[str]) -> None:
        """Swap every staged vector in, in one transaction, once nothing is left unstaged."""
        for attempt in range(CUTOVER_ROUNDS + 1):
            last = attempt == CUTOVER_ROUNDS
            swapped = vm.cut_over_all(
                self.db,
                tables,
                self.target.name,
                self.target.dim(),
                self._embed if last else None,
                self.batch,
                lambda: self.say(f"switching {', '.join(tables)} to {self.target.name}"),
            )
            if swapped is not None:
                for table, count in swapped.items():
                    self.say(f"{table}: {count} rows now served by {self.target.name}")
                return
            for table in tables:  # rows written meanwhile by other processes
                self._stage(table)
        raise RuntimeError("could not reach a moment with every row converted")

    def _finish(self, tables: list[str]) -> None:
        for table in tables:
            index = self.engine.indexes.get(table)
            if index is None:  # PostgreSQL: recall scans the table itself, nothing to rebuild
                continue
            self.say(f"rebuilding the vector index of {table}")
            index.rebuild()
            problems = index.verify()
            if problems:
                raise RuntimeError(f"the {table} index differs from SQLite: {problems[0]}")
            self.say(f"{table} index verified")
        agents = ["", *embedded_agents(self.db)]
        self.say(f"recalibrating {len(agents)} scopes (global and per agent)")
        calibrated = 0
        for agent in agents:
            result = self.engine.calibrator.calibrate(agent)
            calibrated += bool(result.get("ok"))
        self.say(f"calibration rerun: {calibrated} of {len(agents)} scopes calibrated")
        vm.finish_all(self.db, tables)


def run_reembed(settings: Settings, *, dry_run: bool, batch: int, out: TextIO = sys.stderr) -> int:
    """The `cpersona reembed` command; see the module docstring for the exit codes."""
    from cpersona.engine import Engine

    if settings.db_path == ":memory:" or not Path(settings.db_path).exists():
        print(f"cpersona: no database at {settings.db_path}", file=out)
        return 2
    try:
        engine = Engine(settings)
    except Exception as exc:
        from cpersona.storage import open_failure_reason

        reason = open_failure_reason(settings.db_path, settings.database_url, exc)
        print(f"cpersona: cannot open the database {settings.db_path}: {reason}", file=out)
        return 2
    try:
        if not engine.embedder.available:
            print(
                "cpersona: CPERSONA_EMBEDDING_MODE=none: there is no model to convert to",
                file=out,
            )
            return 2
        converter = Converter(engine, out, batch)
        plan = converter.plan()
        if dry_run:
            return _dry_run(converter, plan, out)
        with exclusive(settings.db_path) as mine:
            if not mine:
                print(
                    f"cpersona: another `cpersona reembed` is converting {settings.db_path}",
                    file=out,
                )
                return 1
            try:
                return converter.run()
            except EmbeddingUnavailable as exc:
                print(f"cpersona: reembed stopped, nothing is lost: {exc}", file=out)
                return 2
    finally:
        engine.close()


def _dry_run(converter: Converter, plan: Plan, out: TextIO) -> int:
    if not plan.tables:
        print(f"nothing to convert: every stored vector is {plan.target}'s", file=out)
        return 0
    try:
        per_row = converter.estimate(plan)
    except EmbeddingUnavailable as exc:
        print(f"cpersona: {plan.target} cannot embed: {exc}", file=out)
        return 2
    for table, (done, total) in plan.tables.items():
        print(f"{table}: {total - done} rows to embed ({done} of {total} already done)", file=out)
    print(
        f"{plan.todo} rows with {plan.target}: about {_duration(plan.todo * per_row)} "
        f"({per_row * 1000:.0f} ms a row, timed on a sample here), plus the index rebuild "
        "and calibration",
        file=out,
    )
    return 0
