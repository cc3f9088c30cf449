"""Prometheus metrics of one server process (issue 14): `GET /metrics` on HTTP, or a loopback
port for a stdio server (`CPERSONA_METRICS_PORT`).

Per tool: `cpersona_tool_calls_total{tool}`, `cpersona_tool_errors_total{tool,kind}` and
`cpersona_tool_duration_seconds{tool}`; per recall stage (timings.RECALL_STAGES):
`cpersona_recall_stage_duration_seconds{stage}`. The state gauges (rows per table, vector
index lag and file size, embedding model loaded, live pauses) are read when scraped, not kept
up to date. On PostgreSQL: `cpersona_database_reachable`, `cpersona_database_outages_total`,
`cpersona_database_refused_calls_total` and `cpersona_database_pool_replacements_total`
(storage/pg/reach.py); while the server is unreachable a scrape still answers, without the
rows per table. Label values come from fixed sets: a registered tool name (else `unknown`), an
error kind of the dispatch (server/app.py), a stage name, a table name; never an agent id, a
query or an error text.

prometheus_client costs about 90 ms to import, so nothing imports it until `warm()` (which the
servers run in a background thread at start) or the first call observed: a server without
metrics never pays it, and one with them does not wait for it before answering.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

import anyio
from starlette.types import ASGIApp, Receive, Scope, Send

from cpersona import __version__
from cpersona.storage.counts import table_rows
from cpersona.storage.error_kinds import UnreachableError
from cpersona.timings import RECALL_STAGES

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

    from cpersona.engine import Engine

log = logging.getLogger("cpersona.metrics")

METRICS_PATH = "/metrics"
#: Seconds. Recall stages take tens of microseconds to milliseconds, imports and checks
#: seconds: the Prometheus default (5 ms to 10 s) would put every stage in its first bucket.
BUCKETS = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
    1.0, 2.5, 5.0, 10.0, 30.0,
)  # fmt: skip


class Metrics:
    """The collectors of one server process over one Engine; thread-safe."""

    def __init__(self, engine: Engine, tools: Sequence[str]) -> None:
        self._engine = engine
        self._tools = tuple(tools)
        self._lock = threading.Lock()
        self._collectors: _Collectors | None = None
        self._broken = False

    def warm(self) -> None:
        """Import prometheus_client and build the collectors (idempotent)."""
        self._get()

    def _get(self) -> _Collectors | None:
        """The collectors; None when they could not be built (logged once: metrics must
        never cost a tool call its answer)."""
        collectors = self._collectors
        if collectors is None and not self._broken:
            with self._lock:
                if self._collectors is None and not self._broken:
                    try:
                        self._collectors = _Collectors(self._engine, self._tools)
                    except Exception:
                        self._broken = True
                        log.exception("metrics are off: their collectors could not be built")
                collectors = self._collectors
        return collectors

    # -- what the dispatch reports (server/app.CallObserver) ---------------------------------

    def observe_call(self, tool: str, seconds: float, error: str | None) -> None:
        c = self._get()
        if c is None:
            return
        c.calls.labels(tool).inc()
        c.duration.labels(tool).observe(seconds)
        if error is not None:
            c.errors.labels(tool, error).inc()

    def observe_stage(self, stage: str, seconds: float) -> None:
        c = self._get()
        if c is not None:
            c.stages.labels(stage).observe(seconds)

    # -- exposition --------------------------------------------------------------------------

    def render(self) -> tuple[bytes, str]:
        """(body, content type) of one scrape in the Prometheus text format.

        Raises:
            RuntimeError: the collectors could not be built (see the log).
        """
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        try:
            return generate_latest(self._required().registry), CONTENT_TYPE_LATEST
        finally:
            self._engine.db.release_reader()  # the gauges read in this worker thread

    def _required(self) -> _Collectors:
        c = self._get()
        if c is None:
            raise RuntimeError("metrics are off: their collectors could not be built")
        return c

    def serve_loopback(self, port: int) -> int:
        """Serve the metrics on 127.0.0.1:`port` from a daemon thread; the bound port.

        Raises:
            OSError: the port cannot be bound.
        """
        from prometheus_client import start_http_server

        server, _ = start_http_server(port, addr="127.0.0.1", registry=self._required().registry)
        return int(server.server_address[1])


class _Collectors:
    def __init__(self, engine: Engine, tools: tuple[str, ...]) -> None:
        from prometheus_client import (
            CollectorRegistry,
            Counter,
            Histogram,
            Info,
            disable_created_metrics,
        )
        from prometheus_client.process_collector import ProcessCollector

        # The `_created` twin of every series doubles a scrape and no query here needs it
        # (process-wide in prometheus_client; this process has no other metrics).
        disable_created_metrics()
        self.registry = CollectorRegistry()
        self.calls = Counter(
            "cpersona_tool_calls",
            "Tool calls answered, by tool.",
            ["tool"],
            registry=self.registry,
        )
        self.errors = Counter(
            "cpersona_tool_errors",
            "Tool calls that failed, by tool and kind (refused: the tool answered ok=false).",
            ["tool", "kind"],
            registry=self.registry,
        )

        def seconds(name: str, about: str, label: str) -> Histogram:
            """A duration histogram, by `label`: every one of them shares the buckets."""
            return Histogram(name, about, [label], buckets=BUCKETS, registry=self.registry)

        self.duration = seconds(
            "cpersona_tool_duration_seconds",
            "Time from a tool call's arrival at the dispatch to its answer.",
            "tool",
        )
        self.stages = seconds(
            "cpersona_recall_stage_duration_seconds",
            "Time spent in each recall stage, once per stage run.",
            "stage",
        )
        for tool in tools:  # present from the first scrape, so rate() sees the first call
            self.calls.labels(tool)
        for stage in RECALL_STAGES:
            self.stages.labels(stage)
        Info("cpersona_build", "The cpersona version serving.", registry=self.registry).info(
            {"version": __version__}
        )
        ProcessCollector(registry=self.registry)
        self.registry.register(_StateCollector(engine))


class _StateCollector:
    """The gauges computed at scrape time from the Engine's state."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def describe(self) -> list[Metric]:
        return []  # registering must not scrape the database

    def collect(self) -> Iterator[Metric]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        engine = self._engine
        reach = getattr(engine.db, "reachability", None)
        if reach is not None:
            counts = reach()
            yield GaugeMetricFamily(
                "cpersona_database_reachable",
                "1 while the database server answers, 0 during an outage.",
                value=1 if counts.reachable else 0,
            )
            yield CounterMetricFamily(
                "cpersona_database_outages",
                "Outages seen: times the database server stopped answering.",
                value=counts.outages,
            )
            yield CounterMetricFamily(
                "cpersona_database_refused_calls",
                "Database uses refused because the server was unreachable.",
                value=counts.refused_calls,
            )
            yield CounterMetricFamily(
                "cpersona_database_pool_replacements",
                "Connection pools replaced after their connections were found dead.",
                value=counts.pool_replacements,
            )
        try:
            rows_per_table = table_rows(engine.db)
        except UnreachableError:
            rows_per_table = {}  # the outage is in the gauges above; the rest still answers
        if rows_per_table:
            rows = GaugeMetricFamily("cpersona_table_rows", "Rows per table.", labels=["table"])
            for table, count in rows_per_table.items():
                rows.add_metric([table], count)
            yield rows
        lag = GaugeMetricFamily(
            "cpersona_vector_index_lag_entries",
            "Vector log entries the index file has not applied yet (-1: no usable file; the "
            "next recall rebuilds it).",
            labels=["table"],
        )
        size = GaugeMetricFamily(
            "cpersona_vector_index_file_bytes", "Size of the vector index file.", labels=["table"]
        )
        for table, index in engine.indexes.items():
            try:
                behind = index.lag()
            except UnreachableError:
                behind = None
            lag.add_metric([table], -1 if behind is None else behind)
            try:
                size.add_metric([table], os.stat(index.path).st_size)
            except OSError:
                size.add_metric([table], 0)
        yield lag
        yield size
        yield GaugeMetricFamily(
            "cpersona_embedding_model_loaded",
            "1 when the embedding model is ready (loaded, or remote and configured), else 0.",
            value=1 if _model_loaded(engine) else 0,
        )
        yield GaugeMetricFamily(
            "cpersona_paused_sessions",
            "No-persist pauses live in this process.",
            value=engine.pause.live_count(),
        )


def _model_loaded(engine: Engine) -> bool:
    inner = getattr(engine.embedder, "inner", engine.embedder)
    # Local models load on first use and say so; a remote or hashing provider has no model
    # to load and is ready whenever it is available.
    return bool(getattr(inner, "loaded", inner.available))


class MetricsRoute:
    """Answers `GET /metrics` (and HEAD) with a scrape; every other request passes through.

    Placed inside the authentication middleware, or outside it when
    `CPERSONA_METRICS_PUBLIC=true` (server/http.py).
    """

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] != "http"
            or scope.get("path") != METRICS_PATH
            or scope.get("method") not in ("GET", "HEAD")
        ):
            await self.app(scope, receive, send)
            return
        # Off the event loop: the gauges read SQLite.
        body, content_type = await anyio.to_thread.run_sync(self.metrics.render)
        await send({
            "type": "http.response.start",
            "status": 200,
            "headers": [
                (b"content-type", content_type.encode("ascii")),
                (b"content-length", str(len(body)).encode("ascii")),
                (b"cache-control", b"no-store"),
            ],
        })  # fmt: skip
        head = scope["method"] == "HEAD"
        await send({"type": "http.response.body", "body": b"" if head else body})


def server_metrics(engine: Engine) -> Metrics:
    """The Metrics of a server over `engine`, importing prometheus_client in the background
    (a daemon thread), so start-up does not wait for it."""
    from cpersona.server.tools import all_tools

    metrics = Metrics(engine, [spec.name for spec in all_tools()])
    threading.Thread(target=metrics.warm, name="cpersona-metrics", daemon=True).start()
    return metrics
