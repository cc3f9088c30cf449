"""build_server(engine): the MCP server, its tool list and the outer dispatch (surface.md §1)."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import anyio
import mcp_types as types
from mcp.server.lowlevel.server import Server

from cpersona import __version__
from cpersona.config import Settings
from cpersona.engine import Engine
from cpersona.server.acl import Admitted, Authorize
from cpersona.server.registry import (
    ToolSpec,
    coerce,
    first_nul,
    schema_error,
    unstorable_text,
)
from cpersona.server.tools import all_tools
from cpersona.storage.error_kinds import (
    DISK_FULL,
    BusyError,
    is_disk_full,
    unreachable_answer,
    unreachable_in,
)
from cpersona.timings import CallTimings, timed_call

log = logging.getLogger("cpersona.server")
#: One debug line per tool call with its stage timings (CPERSONA_LOG_LEVEL=debug).
timing_log = logging.getLogger("cpersona.timings")

SERVER_NAME = "cloto-mcp-cpersona"


#: The `tool` label of a call to a name that is not a tool (client-chosen names stay out).
UNKNOWN_TOOL = "unknown"


class CallObserver(Protocol):
    """Where each call's outcome goes (server/metrics.py); `error` is a kind, never a text."""

    def observe_call(self, tool: str, seconds: float, error: str | None) -> None: ...

    def observe_stage(self, stage: str, seconds: float) -> None: ...


def _text(payload: dict[str, Any], *, ascii_only: bool = False) -> types.CallToolResult:
    text = json.dumps(payload, ensure_ascii=ascii_only)
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], isError=False)


def _tool(spec: ToolSpec[Any], settings: Settings) -> types.Tool:
    a = spec.annotations
    return types.Tool(
        name=spec.name,
        description=spec.describe(settings),
        inputSchema=spec.input_schema,
        annotations=types.ToolAnnotations(
            readOnlyHint=a.read_only, destructiveHint=a.destructive, idempotentHint=a.idempotent
        ),
    )


def _error_kind(result: dict[str, Any]) -> str | None:
    """The metrics' error kind of a handler's answer: None for success."""
    if result.get("ok") is not False:
        return None
    return "permission_denied" if result.get("error") == "permission_denied" else "refused"


def _released(engine: Engine, work: Callable[[], None]) -> None:
    try:
        work()
    finally:
        engine.db.release_reader()


def _run_timed(timings: CallTimings, spec: ToolSpec[Any], engine: Engine, args: Any) -> Any:
    # Entered in the worker thread itself, so the pipeline's stages find this call.
    try:
        # Counted as a caller's call: background work (start-up calibration) gives way to it.
        with engine.activity.call(), timed_call(timings):
            return spec.handler(engine, args)
    finally:
        # In the same thread: what the call held (a read transaction, a reader connection
        # beyond the database's bound) goes back before the thread idles.
        engine.db.release_reader()


def build_server(
    engine: Engine,
    *,
    instructions: str | None = None,
    authorize: Authorize | None = None,
    metrics: CallObserver | None = None,
    on_first_call: Callable[[], None] | None = None,
) -> Server[Any]:
    """The MCP server over one open Engine. Tool listing never touches the database or model.

    `authorize` (ACL mode only) runs after schema validation and before anything else reads
    the arguments (surface.md §1.5); a denied call never reaches its handler. `metrics` sees
    every call's duration, error kind and recall stages; with the `cpersona.timings` logger at
    DEBUG each call also logs one line of stage timings. Neither changes any answer.
    `on_first_call` runs once, when the first tool call arrives (the stdio server's background
    work).
    """
    specs = {spec.name: spec for spec in all_tools()}
    listed = types.ListToolsResult(tools=[_tool(spec, engine.settings) for spec in specs.values()])
    if instructions is None:
        instructions = engine.instructions

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return listed

    first_call = [on_first_call]

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        begin, first_call[0] = first_call[0], None
        if begin is not None:  # the stdio server's background work, once
            await anyio.to_thread.run_sync(_released, engine, begin)
        start = time.perf_counter()
        name = params.name if params.name in specs else UNKNOWN_TOOL
        timings = CallTimings(name, metrics.observe_stage if metrics is not None else None)
        kind: str | None = "cancelled"  # what stays when the dispatch itself is interrupted
        try:
            answer, kind = await dispatch(params, timings)
            return answer
        finally:
            seconds = time.perf_counter() - start
            if metrics is not None:
                metrics.observe_call(name, seconds, kind)
            if timing_log.isEnabledFor(logging.DEBUG):
                stages = f" {timings.summary()}" if timings.seconds else ""
                timing_log.debug("tool %s %.2fms %s%s", name, seconds * 1000, kind or "ok", stages)

    async def dispatch(
        params: types.CallToolRequestParams, timings: CallTimings
    ) -> tuple[types.CallToolResult, str | None]:
        """The outer dispatch: the answer and the call's error kind (None: it succeeded)."""
        spec = specs.get(params.name)
        if spec is None:
            return _text({"error": f"Unknown tool: {params.name}"}, ascii_only=True), "unknown_tool"
        arguments = params.arguments or {}
        problem = schema_error(spec, arguments)
        if problem is not None:
            invalid = types.CallToolResult(
                content=[types.TextContent(type="text", text=f"Input validation error: {problem}")],
                isError=True,
            )
            return invalid, "invalid_arguments"
        # --- ACL guard (server/acl.py): wins over every refusal except the schema's ---
        extra: Mapping[str, Any] = {}
        if authorize is not None:
            verdict = authorize(spec.name, arguments)
            engine.db.release_reader()  # the guard read on the event loop's thread
            if isinstance(verdict, Admitted):
                arguments, extra = verdict.arguments, verdict.extra
            elif verdict is not None:
                # The denial echoes the agent id it refused; a lone surrogate there cannot be
                # written as UTF-8, so such a denial is sent \u-escaped.
                escaped = unstorable_text(verdict) is not None
                return _text(verdict, ascii_only=escaped), "permission_denied"
        bad = unstorable_text(arguments)
        if bad is not None:
            refusal = spec.fail(
                f"{bad} holds a lone UTF-16 surrogate, which is not valid Unicode text; "
                "send well-formed UTF-8"
            )
            return _text(refusal), "invalid_text"
        if not engine.db.stores_nul:
            bad = unstorable_text(arguments, find=first_nul)
            if bad is not None:
                refusal = spec.fail(
                    f"{bad} holds the NUL character (U+0000), which this server's database "
                    "(PostgreSQL) cannot store in text; remove it"
                )
                return _text(refusal), "invalid_text"
        args = coerce(spec, arguments)
        try:
            result = await anyio.to_thread.run_sync(_run_timed, timings, spec, engine, args)
        except Exception as exc:  # the outer layer's bare shape, for what handlers did not foresee
            if is_disk_full(exc):  # the transaction was rolled back: say so in the tool's shape
                log.warning("tool %s: %s (%s)", spec.name, DISK_FULL, exc)
                return _text(spec.fail(DISK_FULL)), "disk_full"
            unreachable = unreachable_in(exc)
            if unreachable is not None:  # logged once per outage by the storage layer
                return _text(spec.fail(unreachable_answer(spec.name, unreachable))), "unreachable"
            if isinstance(exc, BusyError):
                log.warning("tool %s: %s", spec.name, exc)
                busy = f"{exc}: {spec.name} was not carried out; try again"
                return _text(spec.fail(busy)), "busy"
            log.exception("tool %s failed", spec.name)
            return _text({"error": f"{type(exc).__name__}: {exc}"}, ascii_only=True), "exception"
        return _text({**result, **extra} if extra else result), _error_kind(result)

    return Server(
        SERVER_NAME,
        version=__version__,
        instructions=instructions,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )
