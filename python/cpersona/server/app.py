"""build_server(engine): the MCP server, its tool list and the outer dispatch (surface.md §1)."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from typing import Any

import anyio
import mcp_types as types
from mcp.server.lowlevel.server import Server

from cpersona import __version__
from cpersona.engine import Engine
from cpersona.server.registry import ToolSpec, coerce, schema_error, unstorable_text
from cpersona.server.tools import all_tools

log = logging.getLogger("cpersona.server")

SERVER_NAME = "cloto-mcp-cpersona"

#: The ACL hook (surface.md §11.4): None lets the call through, a dict is the denial to answer.
Authorize = Callable[[str, Mapping[str, Any]], dict[str, Any] | None]


def _text(payload: dict[str, Any], *, ascii_only: bool = False) -> types.CallToolResult:
    text = json.dumps(payload, ensure_ascii=ascii_only)
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], isError=False)


def _tool(spec: ToolSpec) -> types.Tool:
    a = spec.annotations
    return types.Tool(
        name=spec.name,
        description=spec.description,
        inputSchema=spec.input_schema,
        annotations=types.ToolAnnotations(
            readOnlyHint=a.read_only, destructiveHint=a.destructive, idempotentHint=a.idempotent
        ),
    )


def build_server(
    engine: Engine,
    *,
    instructions: str | None = None,
    authorize: Authorize | None = None,
    on_first_call: Callable[[], None] | None = None,
) -> Server[Any]:
    """The MCP server over one open Engine. Tool listing never touches the database or model.

    `authorize` (ACL mode only) runs after schema validation and before anything else reads
    the arguments (surface.md §1.5); a denied call never reaches its handler. `on_first_call`
    runs once, when the first tool call arrives (the stdio server's background work).
    """
    specs = {spec.name: spec for spec in all_tools(engine.settings)}
    listed = types.ListToolsResult(tools=[_tool(spec) for spec in specs.values()])
    if instructions is None:
        instructions = engine.instructions

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return listed

    first_call = [on_first_call]

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        start, first_call[0] = first_call[0], None
        if start is not None:
            await anyio.to_thread.run_sync(start)
        spec = specs.get(params.name)
        if spec is None:
            return _text({"error": f"Unknown tool: {params.name}"}, ascii_only=True)
        arguments = params.arguments or {}
        problem = schema_error(spec, arguments)
        if problem is not None:
            return types.CallToolResult(
                content=[types.TextContent(type="text", text=f"Input validation error: {problem}")],
                isError=True,
            )
        # --- ACL guard (server/acl.py): wins over every refusal except the schema's ---
        if authorize is not None:
            denial = authorize(spec.name, arguments)
            if denial is not None:
                # The denial echoes the agent id it refused; a lone surrogate there cannot be
                # written as UTF-8, so such a denial is sent \u-escaped.
                return _text(denial, ascii_only=unstorable_text(denial) is not None)
        bad = unstorable_text(arguments)
        if bad is not None:
            return _text(
                spec.fail(
                    f"{bad} holds a lone UTF-16 surrogate, which is not valid Unicode text; "
                    "send well-formed UTF-8"
                )
            )
        args = coerce(spec, arguments)
        try:
            result = await anyio.to_thread.run_sync(spec.handler, engine, args)
        except Exception as exc:  # the outer layer's bare shape, for what handlers did not foresee
            log.exception("tool %s failed", spec.name)
            return _text({"error": f"{type(exc).__name__}: {exc}"}, ascii_only=True)
        return _text(result)

    return Server(
        SERVER_NAME,
        version=__version__,
        instructions=instructions,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )
