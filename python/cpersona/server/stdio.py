"""Serving over stdio: one process per MCP client, possibly several on one database file.

A client waits for `initialize` and `tools/list` before anything else, and importing the MCP
SDK alone takes most of a second; so the SDK loads in a background thread while this module,
which imports none of it, answers those two from the recorded handshake (handshake.py) when
there is one. Everything else, and every line when there is no record, is the SDK's
(stdio_wire.py), which also sees the lines answered early.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any, BinaryIO

from cpersona.config import LOCAL_MODEL_NAMES, Settings, cache_root
from cpersona.engine import Engine
from cpersona.server.handshake import Handshake, Record, record_key
from cpersona.server.startup import open_engine

if TYPE_CHECKING:
    from mcp.server.lowlevel.server import Server

    from cpersona.server.acl import Authorize, Guard
    from cpersona.server.metrics import Metrics
    from cpersona.server.subjects import AliasLedger

log = logging.getLogger("cpersona")


def serve_stdio(
    settings: Settings, *, authorize: Guard | None = None, ledger: AliasLedger | None = None
) -> int:
    """Serve one client on stdin/stdout; `authorize` is the ACL guard in ACL mode, `ledger` the
    alias ledger when the ACL file has per-subject clients (their ids stay reserved here too)."""
    from cpersona.server.banner import index_files_line, stdio_banner

    engine = open_engine(settings)
    if engine is None:
        return 1
    guard: Authorize | None = authorize
    if authorize is not None and ledger is not None:
        from cpersona.errors import ConfigError
        from cpersona.server.subjects import per_subject_guard

        try:
            guard = per_subject_guard(authorize, ledger, engine.db)
        except ConfigError as exc:  # the database holds reserved agent ids
            engine.close()
            print(f"cpersona: {exc}", file=sys.stderr)
            return 2
    # The provider is named from the settings: building it would import numpy before the
    # first answer (docs/notes/performance-notes.md, "Start-up").
    provider = settings.embedding_provider
    label = LOCAL_MODEL_NAMES.get(provider, provider)
    print(stdio_banner(settings, label), file=sys.stderr, flush=True)
    index_line = index_files_line(settings, engine.count_memories)
    if index_line is not None:
        print(index_line, file=sys.stderr, flush=True)
    metrics = None
    if settings.metrics_port is not None:
        metrics = _serve_metrics(engine, settings.metrics_port)

    # Warm-up, calibration and the task queue start with the first tool call, so initialize
    # and tools/list are answered before any of them loads.
    # The stored vectors are another model's: said at start, in one line. Deciding needs the
    # model router (numpy, a probe of unrecorded vectors), built only where SQLite's record
    # does not already name the configured model.
    if engine.stored_model_differs():
        notice = engine.router.notice()
        if notice is not None:
            print(notice, file=sys.stderr, flush=True)
    sdk = _SdkLoader(lambda: _build(engine, guard, metrics))
    sdk.start()
    record = Record.open(cache_root(settings.cache_dir), record_key(settings, engine.instructions))
    handshake = Handshake(record)
    # As in server/http.py: the start-up reads were on this thread, which serves the loop.
    engine.db.release_reader()
    try:
        with claimed_stdio() as (wire_in, wire_out):
            early = answer_early(handshake, wire_in, wire_out, sdk.ready)
            if early.closed:  # the client left before anything needed the SDK
                # Not before the import has finished: an interpreter that exits while a thread
                # is still loading extension modules (pydantic-core) can crash on the way out.
                sdk.ready.wait()
                return 0
            server = sdk.wait()
            import anyio

            from cpersona.server.stdio_wire import serve_lines

            serve = partial(serve_lines, replay=early.lines, handshake=handshake)
            anyio.run(serve, server, wire_in, wire_out)  # its own event loop, until stdin ends
    except KeyboardInterrupt:
        pass
    finally:
        engine.close()
    return 0


def _build(engine: Engine, guard: Authorize | None, metrics: Metrics | None) -> Server[Any]:
    from cpersona.server.app import build_server

    return build_server(
        engine, authorize=guard, metrics=metrics, on_first_call=engine.start_background
    )


class _SdkLoader:
    """Imports the SDK and builds the server in a background thread; `ready` is set when it
    is built (or failed, which `wait` then raises in the serving thread)."""

    def __init__(self, build: Callable[[], Server[Any]]) -> None:
        self.ready = threading.Event()
        self._build = build
        self._server: Server[Any] | None = None
        self._error: BaseException | None = None

    def start(self) -> None:
        threading.Thread(target=self._run, name="cpersona-sdk-load", daemon=True).start()

    def _run(self) -> None:
        try:
            self._server = self._build()
        except BaseException as exc:  # handed to the serving thread, which reports it
            self._error = exc
        finally:
            self.ready.set()

    def wait(self) -> Server[Any]:
        self.ready.wait()
        if self._error is not None:
            raise self._error
        assert self._server is not None
        return self._server


@dataclass
class Early:
    """What was read before the SDK loaded: the lines, in order, and whether stdin ended."""

    lines: list[bytes] = field(default_factory=list)
    closed: bool = False


def answer_early(
    handshake: Handshake, wire_in: BinaryIO, wire_out: BinaryIO, ready: threading.Event
) -> Early:
    """Reads lines until the SDK is needed: while each is answered from the record and the SDK
    is still loading. A line only the SDK can answer ends it at once (its caller waits for
    the SDK, then serves every line read here); so does the SDK being ready."""
    early = Early()
    while not ready.is_set():
        raw = wire_in.readline()
        if not raw:
            early.closed = True
            return early
        early.lines.append(raw)
        if ready.is_set():
            return early
        answer = handshake.early(raw)
        if answer is None:
            return early
        if answer:
            if log.isEnabledFor(logging.DEBUG):
                log.debug("answered %s from the recorded handshake", _method_of(raw))
            _write_line(wire_out, answer)
    return early


def _method_of(raw: bytes) -> str:
    import json

    try:
        return str(json.loads(raw).get("method"))
    except (ValueError, AttributeError):
        return "?"


def _write_line(out: BinaryIO, data: bytes) -> None:
    out.write(data)
    out.flush()


def _serve_metrics(engine: Engine, port: int) -> Metrics:
    """Metrics on 127.0.0.1:`port`, bound in the background: start-up does not wait for the
    import, and a port another stdio server on this machine holds costs only the metrics
    (one warning), never the MCP session."""
    from cpersona.server.metrics import server_metrics

    metrics = server_metrics(engine)

    def bind() -> None:
        try:
            bound = metrics.serve_loopback(port)
        except OSError as exc:
            log.warning("metrics not served: cannot listen on 127.0.0.1:%d: %s", port, exc)
            return
        print(f"  metrics: http://127.0.0.1:{bound}/metrics", file=sys.stderr, flush=True)

    threading.Thread(target=bind, name="cpersona-metrics-port", daemon=True).start()
    return metrics


@contextlib.contextmanager
def claimed_stdio() -> Iterator[tuple[BinaryIO, BinaryIO]]:
    """The protocol's stdin and stdout, on private descriptors, for as long as the server runs.

    Meanwhile fd 0 reads the null device and fd 1 writes to stderr, so a library that prints
    (or a child that reads) cannot corrupt the wire; both are put back on the way out. The
    private descriptors are never closed: a worker thread may still be blocked reading one.
    """
    wire_in, wire_out = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDONLY)
    try:
        os.dup2(null, 0)
        os.dup2(2, 1)
    finally:
        os.close(null)
    try:
        yield (
            os.fdopen(wire_in, "rb", closefd=False),
            os.fdopen(wire_out, "wb", closefd=False),
        )
    finally:
        sys.stdout.flush()
        os.dup2(wire_in, 0)
        os.dup2(wire_out, 1)
