"""The stdio wire once the MCP SDK has loaded: newline-delimited JSON-RPC to and from its server.

Kept apart from stdio.py, which starts answering before this module (and the SDK) is imported.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, BinaryIO

import anyio
import anyio.to_thread
import mcp_types as types
from anyio.streams.memory import MemoryObjectSendStream
from mcp.shared.message import SessionMessage
from pydantic import ValidationError

from cpersona.server.handshake import Handshake
from cpersona.server.jsonrpc import Refusal, bad_id, diagnose, tool_call_with_surrogates

if TYPE_CHECKING:
    from mcp.server.lowlevel.server import Server

log = logging.getLogger("cpersona")


async def serve_lines(
    server: Server[Any],
    wire_in: BinaryIO,
    wire_out: BinaryIO,
    *,
    replay: Sequence[bytes] = (),
    handshake: Handshake | None = None,
) -> None:
    """Serve newline-delimited JSON-RPC: every line the SDK cannot read gets its error answer
    here (jsonrpc.py), the others go to the server; answers are written one line each.

    `replay` holds the lines read before the SDK loaded, served first, in order; `handshake`
    drops (after checking) the SDK's answers to those already answered from the record, and
    records the SDK's handshake answers for the next start (handshake.py)."""
    to_server, from_wire = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    to_wire, from_server = anyio.create_memory_object_stream[SessionMessage](0)
    lines = anyio.wrap_file(wire_in)

    async def reader(answers: MemoryObjectSendStream[SessionMessage]) -> None:
        async def take(raw: bytes) -> None:
            if handshake is not None:
                handshake.inbound(raw)
            outcome = read_line(raw.decode("utf-8", errors="replace"))
            if isinstance(outcome, Refusal):
                if outcome.answer:
                    await answers.send(SessionMessage(outcome.response()))
            elif outcome is not None:
                await to_server.send(SessionMessage(outcome))

        async with to_server, answers:
            for raw in replay:
                await take(raw)
            async for raw in lines:
                await take(raw)

    async def writer() -> None:
        gone = False
        async with from_server:
            async for message in from_server:
                if gone:  # keep taking answers so no handler blocks on a client that left
                    continue
                line = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                data = line.encode() + b"\n"
                if handshake is not None and not handshake.outbound(data):
                    continue  # answered before the SDK loaded
                try:
                    await anyio.to_thread.run_sync(_write_line, wire_out, data)
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
