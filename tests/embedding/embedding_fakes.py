"""A scripted loopback HTTP server standing in for embedding backends and OpenAI-style APIs.

A module of its own (not conftest) so tests can import `Reply` and `unit`.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from cpersona.embedding import EmbeddingMisconfigured, EmbeddingProvider
from cpersona.errors import EmbeddingUnavailable


@dataclass
class Seen:
    """One request the backend received."""

    path: str
    headers: dict[str, str]
    body: Any  # the decoded JSON


@dataclass
class Reply:
    """What the backend answers. `body` may be bytes, or any JSON value to encode."""

    body: Any = None
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    content_length: bool = True  # False: HTTP/1.0 close-delimited body
    delay: float = 0.0  # seconds before answering (interrupted when the test ends)
    trickle: float = 0.0  # seconds between single bytes of the body (interrupted likewise)


class EmbeddingService:
    """A loopback server on 127.0.0.1; `answer` maps each request to a `Reply`."""

    def __init__(self) -> None:
        self.requests: list[Seen] = []
        self.answer: Callable[[Seen], Reply] = lambda seen: Reply(status=500)
        self.stop = threading.Event()
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.backend = self
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    def url(self, path: str = "/embed", userinfo: str = "", query: str = "") -> str:
        auth = f"{userinfo}@" if userinfo else ""
        return (
            f"http://{auth}127.0.0.1:{self._server.server_port}{path}{'?' + query if query else ''}"
        )

    def reply(self, reply: Reply) -> None:
        """Answer every request with `reply`."""
        self.answer = lambda seen: reply

    def embeddings(self, width: int = 4) -> None:
        """Answer like a correct CPersona backend: one unit vector per text."""

        def answer(seen: Seen) -> Reply:
            return Reply({"embeddings": [unit(width, i) for i in range(len(seen.body["texts"]))]})

        self.answer = answer

    def __enter__(self) -> EmbeddingService:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()


def unit(width: int, i: int) -> list[float]:
    """A unit vector with its one non-zero value at position i % width."""
    vector = [0.0] * width
    vector[i % width] = 1.0
    return vector


class _Server(ThreadingHTTPServer):
    backend: EmbeddingService

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that timed out and hung up is what several tests want


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_POST(self) -> None:
        backend = self.server.backend
        raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        seen = Seen(self.path, dict(self.headers.items()), json.loads(raw))
        backend.requests.append(seen)
        reply = backend.answer(seen)
        if reply.delay and backend.stop.wait(reply.delay):
            return
        body = reply.body if isinstance(reply.body, bytes) else json.dumps(reply.body).encode()
        self.send_response(reply.status)
        for name, value in reply.headers.items():
            self.send_header(name, value)
        if reply.content_length and "Content-Length" not in reply.headers:
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if not reply.trickle:
            self.wfile.write(body)
            return
        for i in range(len(body)):
            self.wfile.write(body[i : i + 1])
            self.wfile.flush()
            if backend.stop.wait(reply.trickle):
                return

    def log_message(self, format: str, *args: Any) -> None:
        pass


def assert_rejected(
    provider: EmbeddingProvider, texts: list[str], words: str
) -> EmbeddingUnavailable:
    """A bad answer is `EmbeddingUnavailable` naming `words`, never `EmbeddingMisconfigured`:
    the request left the process, so the service, not the settings, is at fault."""
    with pytest.raises(EmbeddingUnavailable, match=re.escape(words)) as info:
        provider.embed(texts)
    assert not isinstance(info.value, EmbeddingMisconfigured)
    assert provider.dim() is None  # nothing was learned from a rejected answer
    return info.value
