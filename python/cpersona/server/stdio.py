"""Serving over stdio: one process per MCP client, possibly several on one database file."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, BinaryIO

import anyio
import anyio.to_thread
import mcp_types as types
from anyio.streams.memory import MemoryObjectSendStream
from mcp.shared.message import SessionMessage
from pydantic import ValidationError

from cpersona.config import LOCAL_MODEL_NAMES, Settings
from cpersona.engine import Engine
from cpersona.server.jsonrpc import Refusal, bad_id, diagnose, tool_call_with_surrogates
from cpersona.storage import database_label, open_failure_reason

if TYPE_CHECKING:
    from mcp.server.lowlevel.server import Server

    from cpersona.server.acl import Guard
    from cpersona.server.app import Authorize
    from cpersona.server.metrics import Metrics
    from cpersona.server.subjects import AliasLedger

log = logging.getLogger("cpersona")


def serve_stdio(
    settings: Settings, *, authorize: Guard | None = None, ledger: AliasLedger | None = None
) -> int:
    """Serve one client on stdin/stdout; `authorize` is the ACL guard in ACL mode, `ledger` the
    alias ledger when the ACL file has per-subject clients (their ids stay reserved here too)."""
    from cpersona.cli import banner
    from cpersona.server.app import build_server

    try:
        engine = Engine(settings)
    except Exception as exc:  # an unusable database path, a locked or corrupt file
        where = database_label(settings.db_path, settings.database_url)
        reason = open_failure_reason(settings.db_path, settings.database_url, exc)
        print(f"cpersona: cannot open the database {where}: {reason}", file=sys.stderr)
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
    # first answer (docs/performance.md, "Start-up").
    provider = settings.embedding_provider
    label = LOCAL_MODEL_NAMES.get(provider, provider)
    print(banner(settings, label), file=sys.stderr, flush=True)
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
    server = build_server(
        engine, authorize=guard, metrics=metrics, on_first_call=engine.start_background
    )

    engine.db.release_reader()  # as in server/http.py: start-up read on the loop's thread

    async def run() -> None:
        with claimed_stdio() as (wire_in, wire_out):
            await serve_lines(server, wire_in, wire_out)

    try:
        anyio.run(run)
    except KeyboardInterrupt:
        pass
    finally:
        engine.close()
    return 0


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


async def serve_lines(server: Server[Any], wire_in: BinaryIO, wire_out: BinaryIO) -> None:
    """Serve newline-delimited JSON-RPC: every line the SDK cannot read gets its error answer
    here (jsonrpc.py), the others go to the server; answers are written one line each."""
    to_server, from_wire = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    to_wire, from_server = anyio.create_memory_object_stream[SessionMessage](0)
    lines = anyio.wrap_file(wire_in)

    async def reader(answers: MemoryObjectSendStream[SessionMessage]) -> None:
        async with to_server, answers:
            async for raw in lines:
                outcome = read_line(raw.decode("utf-8", errors="replace"))
                if isinstance(outcome, Refusal):
                    if outcome.answer:
                        await answers.send(SessionMessage(outcome.response()))
                elif outcome is not None:
                    await to_server.send(SessionMessage(outcome))

    async def writer() -> None:
        gone = False
        async with from_server:
            async for message in from_server:
                if gone:  # keep taking answers so no handler blocks on a client that left
                    continue
                line = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                try:
                    await anyio.to_thread.run_sync(_write_line, wire_out, line.encode() + b"\n")
                except OSError as exc:  # the client closed its end of the pipe
                    log.info("stdout closed by the client (%s); answers are dropped", exc)
                    gone = True

    async with anyio.create_task_group() as tg:
        tg.start_soon(reader, to_wire.clone())
        tg.start_soon(writer)
        async with to_wire:
            await server.run(from_wire, to_wire, server.create_initialization_options())


def _write_line(out: BinaryIO, data: bytes) -> None:
    out.write(data)
    out.flush()


def read_line(line: str) -> types.JSONRPCMessage | Refusal | None:
    """One stdin line as the SDK reads it, its refusal, or None for a blank line."""
    if not line.strip():
        return None
    try:
        message = types.jsonrpc_message_adapter.validate_json(line, by_name=False)
    except ValidationError:
        pass
    else:
        return bad_id(message, line) or message
    try:
        call = tool_call_with_surrogates(line)
    except Exception:  # whatever this second reading trips on, the refusal below answers
        log.debug("could not re-read a refused line", exc_info=True)
        call = None
    return call if call is not None else diagnose(line)
