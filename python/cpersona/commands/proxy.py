"""The stdio→HTTP bridge (surface.md §11.6): `python -m cpersona.proxy_stdio` / `cpersona proxy`.

An MCP client that can only spawn a stdio server reaches a shared cpersona HTTP server through
this relay. Each newline-delimited JSON-RPC message read from stdin is POSTed to
`CPERSONA_REMOTE_URL` with `Authorization: Bearer $CPERSONA_AUTH_TOKEN`; whatever the server
answers (a JSON body or an SSE stream of messages) is written to stdout, one message a line.

What a client relies on:
- Every request (a message with an `id`) gets exactly one answer: the server's, or, when the
  transport fails (connection refused or reset, timeout, an HTTP error without a JSON-RPC body),
  a JSON-RPC error with code -32000 naming what failed. Notifications never get one.
- At most `CPERSONA_PROXY_MAX_INFLIGHT` requests are in flight; reading stdin pauses beyond that,
  so a flooding client is slowed down, never buffered without bound.
- On stdin EOF the bridge answers or fails every request still in flight, then exits 0.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import BinaryIO

import httpx2

from cpersona.commands.environment import settings_from_env
from cpersona.config import Settings

log = logging.getLogger("cpersona.proxy")

#: JSON-RPC's "server error" range; §11.6 fixes this one for transport failures.
TRANSPORT_ERROR = -32000
PARSE_ERROR = -32700
#: Headers the streamable-HTTP transport asks a client to echo on every later request.
_SESSION_HEADER = "mcp-session-id"
_VERSION_HEADER = "mcp-protocol-version"
_SSE_LINE = re.compile(r"\r\n|\r|\n")


@dataclass
class BridgeConfig:
    url: str
    token: str | None
    max_inflight: int
    timeout: float

    @classmethod
    def from_settings(cls, settings: Settings) -> BridgeConfig:
        return cls(
            url=settings.remote_url,
            token=settings.auth_token,
            max_inflight=settings.proxy_max_inflight,
            timeout=settings.proxy_timeout_seconds,
        )


@dataclass
class _Session:
    """What the server told us to repeat: its session id and the negotiated protocol version."""

    headers: dict[str, str] = field(default_factory=dict)

    def learn(self, response: httpx2.Response, messages: list[object]) -> None:
        session = response.headers.get(_SESSION_HEADER)
        if session:
            self.headers[_SESSION_HEADER] = session
        for message in messages:
            if not isinstance(message, dict):
                continue
            result = message.get("result")
            if isinstance(result, dict) and isinstance(result.get("protocolVersion"), str):
                self.headers[_VERSION_HEADER] = result["protocolVersion"]


def error_response(request_id: object, code: int, message: str) -> dict[str, object]:
    return {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}}


def request_ids(message: object) -> list[object]:
    """The ids a message expects answers for: a request's id, or each request's in a batch."""
    items = message if isinstance(message, list) else [message]
    ids: list[object] = []
    for item in items:
        # A request has a method and an id; a response from the client has an id but no method
        # and, like a notification, gets no answer.
        if isinstance(item, dict) and "method" in item and item.get("id") is not None:
            ids.append(item["id"])
    return ids


def sse_messages(text: str) -> Iterator[object]:
    """The JSON payloads of an SSE body: each event's `data:` lines joined (WHATWG rules)."""
    data: list[str] = []
    # Only CR, LF and CRLF end an SSE line: str.splitlines() would also cut at U+2028, U+0085
    # and the like, which JSON carries unescaped inside strings (a memory's text).
    for raw in [*_SSE_LINE.split(text), ""]:
        if raw == "":
            if data:
                payload = "\n".join(data)
                data = []
                try:
                    yield json.loads(payload)
                except json.JSONDecodeError:
                    log.warning("the server sent an SSE event that is not JSON; skipped")
            continue
        if raw.startswith(":"):
            continue
        name, _, value = raw.partition(":")
        if name == "data":
            data.append(value[1:] if value.startswith(" ") else value)


def body_messages(response: httpx2.Response) -> list[object]:
    """The JSON-RPC messages of one HTTP answer, JSON or SSE-framed.

    Anything else in a body (the server's plain `{"error": "unauthorized"}` on a 401, an HTML
    error page from a proxy in between) is not relayed: the client reads stdout as JSON-RPC.
    """
    if not response.content:
        return []
    kind = response.headers.get("content-type", "").split(";")[0].strip().lower()
    found: list[object] = []
    if kind == "text/event-stream":
        for message in sse_messages(response.text):
            found.extend(message if isinstance(message, list) else [message])
    else:
        try:
            decoded = json.loads(response.content)
        except (json.JSONDecodeError, UnicodeDecodeError):
            return []
        found = decoded if isinstance(decoded, list) else [decoded]
    return [m for m in found if isinstance(m, dict) and m.get("jsonrpc") == "2.0"]


def _answered_ids(messages: list[object]) -> set[str]:
    return {
        json.dumps(m.get("id"))
        for m in messages
        if isinstance(m, dict) and ("result" in m or "error" in m)
    }


class Bridge:
    def __init__(self, config: BridgeConfig, out: BinaryIO | None = None) -> None:
        self.config = config
        self._out: BinaryIO = out if out is not None else sys.stdout.buffer
        self._write_lock = threading.Lock()
        self._session = _Session()
        self._slots = asyncio.Semaphore(config.max_inflight)
        headers = {
            "content-type": "application/json",
            "accept": "application/json, text/event-stream",
        }
        if config.token:
            headers["authorization"] = f"Bearer {config.token}"
        self._http = httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(config.timeout))

    def emit(self, message: object) -> None:
        line = json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"
        with self._write_lock:  # one message per line, never interleaved
            self._out.write(line)
            self._out.flush()

    async def relay(self, line: bytes) -> None:
        try:
            message = json.loads(line)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            self.emit(error_response(None, PARSE_ERROR, f"Parse error: {exc}"))
            return
        ids = request_ids(message)
        try:
            response = await self._http.post(
                self.config.url, content=line, headers=self._session.headers
            )
        except httpx2.HTTPError as exc:
            self._fail(ids, f"{_describe(exc)} ({self.config.url})")
            return
        except (httpx2.InvalidURL, ValueError) as exc:
            # Raised while building the request (not an HTTPError): without this answer the
            # client would wait for ever on a request the task silently dropped.
            self._fail(ids, f"cannot send to CPERSONA_REMOTE_URL {self.config.url!r}: {exc}")
            return
        messages = body_messages(response)
        self._session.learn(response, messages)
        for answer in messages:
            self.emit(answer)
        missing = [i for i in ids if json.dumps(i) not in _answered_ids(messages)]
        if missing:
            self._fail(missing, _http_failure(response))

    def _fail(self, ids: list[object], reason: str) -> None:
        if not ids:
            log.warning("a notification could not be delivered: %s", reason)
        for request_id in ids:
            self.emit(error_response(request_id, TRANSPORT_ERROR, reason))

    async def run(self, lines: asyncio.Queue[bytes | None]) -> None:
        tasks: set[asyncio.Task[None]] = set()
        try:
            while (line := await lines.get()) is not None:
                if not line.strip():
                    continue
                await self._slots.acquire()
                task = asyncio.create_task(self._guarded(line))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
            # EOF: every request already sent is answered or failed before we exit.
            if tasks:
                await asyncio.gather(*tasks)
        finally:
            await self._http.aclose()

    async def _guarded(self, line: bytes) -> None:
        try:
            await self.relay(line)
        finally:
            self._slots.release()


def _describe(exc: httpx2.HTTPError) -> str:
    if isinstance(exc, httpx2.TimeoutException):
        return "the cpersona server did not answer in time"
    if isinstance(exc, httpx2.ConnectError):
        return "cannot connect to the cpersona server"
    return f"the connection to the cpersona server failed: {type(exc).__name__}"


def _http_failure(response: httpx2.Response) -> str:
    if response.status_code == 401:
        return "the cpersona server refused the token (HTTP 401): check CPERSONA_AUTH_TOKEN"
    if response.is_success:
        return f"the cpersona server sent no answer to this request (HTTP {response.status_code})"
    return f"the cpersona server answered HTTP {response.status_code}"


def _read_stdin(loop: asyncio.AbstractEventLoop, queue: asyncio.Queue[bytes | None]) -> None:
    # A thread, not the event loop's pipe reader: stdin may be a file or a terminal, and a line
    # may be longer than asyncio's stream limit.
    # The queue is bounded, so this thread waits while it is full and a client that floods stdin
    # waits on its pipe instead of growing our memory.
    stdin = sys.stdin.buffer
    try:
        for line in iter(stdin.readline, b""):
            asyncio.run_coroutine_threadsafe(queue.put(line), loop).result()
    finally:
        asyncio.run_coroutine_threadsafe(queue.put(None), loop).result()


async def _main(config: BridgeConfig) -> None:
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[bytes | None] = asyncio.Queue(maxsize=config.max_inflight)
    reader = threading.Thread(target=_read_stdin, args=(loop, queue), daemon=True)
    reader.start()
    await Bridge(config).run(queue)


def run(settings: Settings) -> int:
    """Relay until stdin ends; logging is the caller's (stderr: stdout is the protocol)."""
    config = BridgeConfig.from_settings(settings)
    # httpx2 logs every request at INFO: one line per relayed message is noise on a client's
    # stderr.
    logging.getLogger("httpx2").setLevel(logging.WARNING)
    log.info("relaying stdio to %s (at most %d in flight)", config.url, config.max_inflight)
    try:
        asyncio.run(_main(config))
    except KeyboardInterrupt:
        return 130
    return 0


def main() -> int:
    settings = settings_from_env("cpersona proxy")
    if settings is None:
        return 2
    logging.basicConfig(
        stream=sys.stderr,
        level=settings.log_level.upper(),
        format="%(asctime)s [%(name)s] %(levelname)s: %(message)s",
    )
    return run(settings)


if __name__ == "__main__":
    sys.exit(main())
