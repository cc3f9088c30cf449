"""Serving over stdio: one process per MCP client, possibly several on one database file."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, BinaryIO

import anyio
import anyio.to_thread
import mcp_types as types
from anyio.streams.memory import MemoryObjectSendStream
from mcp.shared.message import SessionMessage
from pydantic import ValidationError

from cpersona.config import Settings
from cpersona.engine import Engine
from cpersona.memory.text import first_surrogate
from cpersona.server.jsonrpc import SURROGATE_ESCAPE, Refusal, bad_id, diagnose

if TYPE_CHECKING:
    from mcp.server.lowlevel.server import Server

    from cpersona.server.app import Authorize

log = logging.getLogger("cpersona")


def serve_stdio(settings: Settings, *, authorize: Authorize | None = None) -> int:
    """Serve one client on stdin/stdout; `authorize` is the ACL guard in ACL mode."""
    from cpersona.cli import banner
    from cpersona.server.app import build_server

    try:
        engine = Engine(settings)
    except Exception as exc:  # an unusable database path, a locked or corrupt file
        print(f"cpersona: cannot open the database {settings.db_path}: {exc}", file=sys.stderr)
        return 1
    print(banner(settings, engine.embedder.name), file=sys.stderr, flush=True)
    server = build_server(engine, authorize=authorize)
    engine.start_index_warmup()
    engine.start_calibration()
    engine.tasks.start()  # drains legacy pending_memory_tasks rows (surface.md §9.6)

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
        async with from_server:
            async for message in from_server:
                line = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                await anyio.to_thread.run_sync(_write_line, wire_out, line.encode() + b"\n")

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
        call = _tool_call_with_surrogates(line)
    except Exception:  # whatever this second reading trips on, the refusal below answers
        log.debug("could not re-read a refused line", exc_info=True)
        call = None
    return call if call is not None else diagnose(line)


def _tool_call_with_surrogates(line: str) -> types.JSONRPCMessage | None:
    """The tool call that pydantic refused only for lone surrogates inside its arguments.

    Pydantic refuses a JSON string escape of a lone UTF-16 surrogate (`"\\ud83d"`, what a
    JavaScript client sends for an emoji cut in half) as invalid JSON. Python's json accepts
    it: a `tools/call` whose only surrogates are inside its arguments is let through, and the
    tool answers it with its own refusal (app.py: nothing is written).
    """
    if not SURROGATE_ESCAPE.search(line):
        return None
    message = json.loads(line)
    if not isinstance(message, dict) or message.get("method") != "tools/call":
        return None
    params = message.get("params")
    if not isinstance(params, dict) or not isinstance(params.get("arguments"), dict):
        return None
    # Only the arguments may carry them: the SDK echoes other fields (e.g. an unknown method)
    # into its answers, and a lone surrogate cannot be written back as UTF-8.
    envelope = {**message, "params": {k: v for k, v in params.items() if k != "arguments"}}
    if first_surrogate(json.dumps(envelope, ensure_ascii=False)) is not None:
        return None
    return types.jsonrpc_message_adapter.validate_python(message, by_name=False)
