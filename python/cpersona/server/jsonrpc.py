"""An answer for every JSON-RPC request the SDK cannot read, on both transports.

The SDK drops a stdio line it cannot validate (a `tools/call` whose `params` is a string, a
message nested deeper than its JSON parser goes) without a word, so its caller waits forever;
over HTTP it answers 400 with `"id": null` and a pydantic dump as the message. JSON-RPC 2.0
says every request with an id gets a response: here a message the SDK refuses is read again
with Python's json (or, past its recursion limit, with a bracket scanner) to find its id and
say what is wrong, with the JSON-RPC code for it:

* -32700 parse error: not JSON (the id cannot be known: `null`);
* -32600 invalid request: not a JSON-RPC 2.0 request object, an id that is neither a string
  nor an integer (`null`: it cannot be echoed), a batch (MCP has none), nesting too deep
  outside `params`;
* -32602 invalid params: `params` that is not an object, or nested too deep.

A well-formed message costs one extra validation over HTTP (about 3 ms per MiB) and nothing on
stdio, where this is the only reading; everything here runs only for what the SDK refused.
"""

from __future__ import annotations

import json
import logging
import re
from collections import deque
from dataclasses import dataclass
from typing import Any

import mcp_types as types
from pydantic import ValidationError
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from cpersona.memory.text import first_surrogate

log = logging.getLogger("cpersona.jsonrpc")

#: The deepest nesting of objects and arrays the SDK's JSON parser (pydantic-core) reads, the
#: message object itself being level 1. One level more and it refuses the whole message.
MAX_DEPTH = 200

#: A JSON escape of a UTF-16 surrogate (`\\ud800` to `\\udfff`), paired or not.
SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")

_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|[{}\[\],:]')


@dataclass(frozen=True, slots=True)
class Refusal:
    """The error answer to one unreadable message. `answer` is False for a notification."""

    code: int
    message: str
    id: types.RequestId | None = None
    answer: bool = True

    def response(self) -> types.JSONRPCError:
        return types.JSONRPCError(
            jsonrpc="2.0", id=self.id, error=types.ErrorData(code=self.code, message=self.message)
        )

    def body(self) -> bytes:
        return self.response().model_dump_json(by_alias=True, exclude_unset=True).encode()


def read_body(body: bytes) -> Refusal | None:
    """HTTP: None when the SDK can read `body`, else the refusal.

    The SDK parses with pydantic-core then validates; `validate_json` refuses exactly what that
    refuses, in one pass. A tool call whose only flaw is a lone surrogate in its arguments is
    let through as on stdio: the SDK's per-request (2026) path reads it with Python's json and
    the tool answers its own refusal; the legacy path answers its parse error.
    """
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        return Refusal(types.PARSE_ERROR, "Parse error: the body is not UTF-8")
    try:
        message = types.jsonrpc_message_adapter.validate_json(body, by_name=False)
    except ValidationError:
        try:
            if tool_call_with_surrogates(text) is not None:
                return None
        except Exception:  # whatever this second reading trips on, the refusal answers
            log.debug("could not re-read a refused body", exc_info=True)
        return diagnose(text)
    return bad_id(message, text)


def bad_id(message: types.JSONRPCMessage, text: str) -> Refusal | None:
    """The refusal of a request whose id is neither a string nor an integer, else None.

    The SDK reads `{"id": 1.5, "method": ...}` (or `"id": null`) as a notification, which gets
    no answer; its sender expects one.
    """
    if not isinstance(message, types.JSONRPCNotification) or '"id"' not in text:
        return None
    parsed = json.loads(text)
    if isinstance(parsed, dict) and "id" in parsed:
        return Refusal(types.INVALID_REQUEST, "Invalid Request: id must be a string or an integer")
    return None


def diagnose(text: str) -> Refusal:
    """Why the SDK refused `text`, as a JSON-RPC error carrying the request's id if it has one."""
    if not text.strip():
        return Refusal(types.PARSE_ERROR, "Parse error: empty message")
    try:
        members, depth = _members(json.loads(text))
    except RecursionError:  # deeper than Python's own parser goes: scan the brackets instead
        members, depth = _scan(text)
    except ValueError as exc:
        return Refusal(types.PARSE_ERROR, f"Parse error: {exc}")
    if members is None:
        kind = "a batch (MCP has no batches)" if text.lstrip().startswith("[") else "not an object"
        return Refusal(types.INVALID_REQUEST, f"Invalid Request: the message is {kind}")
    raw_id = members.get("id", _ABSENT)
    has_method = "method" in members
    request_id = raw_id if _is_request_id(raw_id) else None
    # A notification (a method and no id) gets no answer, but over HTTP its POST still does.
    answer = raw_id is not _ABSENT or not has_method

    def refuse(code: int, message: str) -> Refusal:
        return Refusal(code, message, request_id, answer)

    if raw_id is not _ABSENT and request_id is None:
        return refuse(types.INVALID_REQUEST, "Invalid Request: id must be a string or an integer")
    if depth > MAX_DEPTH:
        inside_params = has_method and _depth(members.get("params")) + 1 > MAX_DEPTH
        return refuse(
            types.INVALID_PARAMS if inside_params else types.INVALID_REQUEST,
            f"{'Invalid params' if inside_params else 'Invalid Request'}: the message is nested "
            f"{depth} levels deep; this server reads at most {MAX_DEPTH}",
        )
    if members.get("jsonrpc") != "2.0":
        return refuse(types.INVALID_REQUEST, 'Invalid Request: jsonrpc must be "2.0"')
    if not has_method:
        if "result" in members or "error" in members:
            return refuse(types.INVALID_REQUEST, "Invalid Request: malformed response")
        return refuse(types.INVALID_REQUEST, "Invalid Request: no method")
    if not isinstance(members["method"], str):
        return refuse(types.INVALID_REQUEST, "Invalid Request: method must be a string")
    params = members.get("params")
    if params is not None and not isinstance(params, dict):
        return refuse(types.INVALID_PARAMS, "Invalid params: params must be an object")
    if SURROGATE_ESCAPE.search(text):
        return refuse(
            types.INVALID_PARAMS,
            "Invalid params: a lone UTF-16 surrogate escape is not valid Unicode text; "
            "send well-formed UTF-8",
        )
    return refuse(types.INVALID_REQUEST, "Invalid Request: not a JSON-RPC 2.0 message")


_ABSENT: Any = object()


def _is_request_id(value: Any) -> bool:
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def _members(value: Any) -> tuple[dict[str, Any] | None, int]:
    return (value if isinstance(value, dict) else None), _depth(value)


def _depth(value: Any) -> int:
    """Nesting depth of a parsed JSON value (a scalar is 0, `{}` and `[]` are 1), iteratively."""
    deepest = 0
    stack = [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, _Deep):
            deepest = max(deepest, level - 1 + item.depth)
            continue
        if isinstance(item, dict):
            children = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        deepest = max(deepest, level)
        stack.extend((child, level + 1) for child in children)
    return deepest


class _Deep:
    """Stands for a member value too deep to parse: its depth is all that is known of it."""

    def __init__(self, depth: int) -> None:
        self.depth = depth


def _scan(text: str) -> tuple[dict[str, Any] | None, int]:
    """The top-level members of a JSON object too deep for json.loads, and the deepest level.

    Shallow member values (the id, the method) are parsed; deeper ones stand as `_Deep`.
    (The scan is only ever reached past Python's recursion limit, far past MAX_DEPTH, so
    nothing but their depth matters.)
    """
    body = text.strip()
    if not body.startswith("{"):
        return None, _scan_depth(body)
    members: dict[str, Any] = {}
    depth = deepest = 0
    key: str | None = None
    start = 0
    level_max = 0
    for match in _TOKEN.finditer(body):
        token = match.group()
        if token in "{[":
            depth += 1
            deepest = max(deepest, depth)
            level_max = max(level_max, depth)
        elif token in "}]":
            if depth == 1 and key is not None:
                members[key] = _member(body[start : match.start()], level_max - 1)
                key = None
            depth -= 1
        elif depth == 1 and token == ",":
            if key is not None:
                members[key] = _member(body[start : match.start()], level_max - 1)
            key = None
        elif depth == 1 and token == ":":
            start, level_max = match.end(), 1
        elif depth == 1 and token.startswith('"') and key is None:
            key = json.loads(token)
    return members, deepest


def _member(raw: str, depth: int) -> Any:
    if depth <= 32:
        try:
            return json.loads(raw)
        except ValueError:
            pass
    return _Deep(depth)


def _scan_depth(body: str) -> int:
    depth = deepest = 0
    for match in _TOKEN.finditer(body):
        token = match.group()
        if token in "{[":
            depth += 1
            deepest = max(deepest, depth)
        elif token in "}]":
            depth -= 1
    return deepest


class JsonRpcGuard:
    """HTTP: reads a POST body whole and answers it itself when the SDK could not read it.

    A client that hangs up mid-body is let go quietly (the SDK would log its `ClientDisconnect`
    as a full traceback); a body the SDK can read is replayed to it unchanged.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("method") != "POST":
            await self.app(scope, receive, send)
            return
        held: deque[Message] = deque()
        chunks: list[bytes] = []
        while True:
            message = await receive()
            held.append(message)
            if message["type"] == "http.disconnect":
                log.info("a client hung up before its request body was complete")
                return
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        if _is_json(scope):
            refusal = read_body(b"".join(chunks))
            if refusal is not None:
                await _answer(send, refusal)
                return

        async def replay() -> Message:
            return held.popleft() if held else await receive()

        await self.app(scope, replay, send)


def _is_json(scope: Scope) -> bool:
    for name, value in scope.get("headers", ()):
        if name == b"content-type":
            return value.split(b";")[0].strip().lower() == b"application/json"
    return False


async def _answer(send: Send, refusal: Refusal) -> None:
    body = refusal.body()
    await send({
        "type": "http.response.start",
        "status": 400,
        "headers": [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode("ascii")),
        ],
    })  # fmt: skip
    await send({"type": "http.response.body", "body": body})


def tool_call_with_surrogates(line: str) -> types.JSONRPCMessage | None:
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
