"""Serving over stdio: one process per MCP client, possibly several on one database file."""

from __future__ import annotations

import json
import logging
import re
import sys
import threading
from types import TracebackType
from typing import TYPE_CHECKING, Any

import anyio
import mcp_types as types
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage
from pydantic import ValidationError

from cpersona.config import LOCAL_MODEL_NAMES, Settings
from cpersona.engine import Engine
from cpersona.memory.text import first_surrogate

if TYPE_CHECKING:
    from cpersona.server.acl import Guard
    from cpersona.server.app import Authorize
    from cpersona.server.metrics import Metrics
    from cpersona.server.subjects import AliasLedger

log = logging.getLogger("cpersona")

#: A JSON escape of a UTF-16 surrogate (`\\ud800` to `\\udfff`), paired or not.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


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
        print(f"cpersona: cannot open the database {settings.db_path}: {exc}", file=sys.stderr)
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

    async def run() -> None:
        async with stdio_server() as (read, write):
            await server.run(
                LoneSurrogateTolerant(read), write, server.create_initialization_options()
            )

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


class LoneSurrogateTolerant:
    """The transport's read stream, with tool calls whose arguments hold lone surrogates let in.

    The SDK parses each stdin line with pydantic, which refuses a JSON string escape of a lone
    UTF-16 surrogate (`"\\ud83d"`, what a JavaScript client sends for an emoji cut in half) as
    invalid JSON; the request is then dropped unanswered and its caller waits forever. Python's
    json accepts such a line: a `tools/call` whose only surrogates are inside its arguments is
    let through, and the tool answers it with its own refusal (app.py: nothing is written).
    Anything else the SDK refused stays refused.
    """

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    @property
    def last_context(self) -> Any:
        return getattr(self._inner, "last_context", None)

    async def receive(self) -> Any:
        return _reparse(await self._inner.receive())

    async def aclose(self) -> None:
        await self._inner.aclose()

    def __aiter__(self) -> LoneSurrogateTolerant:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def __aenter__(self) -> LoneSurrogateTolerant:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> bool | None:
        await self.aclose()
        return None


def _reparse(item: Any) -> Any:
    """`item`, or the tool call that pydantic refused only for its lone surrogates."""
    if not isinstance(item, ValidationError):
        return item
    try:
        call = _tool_call_with_surrogates(item)
    except Exception:  # whatever this second reading trips on, the SDK's refusal stands
        log.debug("could not re-read a refused line", exc_info=True)
        return item
    return item if call is None else call


def _tool_call_with_surrogates(error: ValidationError) -> SessionMessage | None:
    errors = error.errors()
    line = errors[0].get("input") if len(errors) == 1 else None
    if errors[0].get("type") != "json_invalid" or not isinstance(line, str):
        return None
    if not _SURROGATE_ESCAPE.search(line):
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
    return SessionMessage(types.jsonrpc_message_adapter.validate_python(message, by_name=False))
