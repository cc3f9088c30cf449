"""How long an HTTP connection may take and how many there may be (issue 11.4).

uvicorn closes a connection idle between requests after `timeout_keep_alive`, and nothing
else: a client that connects and sends nothing, or trickles its headers or body a byte at a
time, holds its descriptor forever, and enough of them exhaust the process's descriptors
(uvicorn then cannot accept anyone, and asyncio logs every failed accept with a traceback).
`guarded_protocol` is uvicorn's h11 protocol with what an exposed service needs on top:

* a header deadline: the request line and headers complete within `header_timeout` of the
  connection opening, or of the first byte of the next request on a kept-alive connection
  (a deadline, not an idle timer: trickling bytes does not extend it); else 408 and close;
* a body deadline: the whole body within `body_timeout` of the headers; else the connection
  is closed (the request is already with the app, which sees a disconnect);
* a bound on open connections, `max_connections`: at the bound, a new connection takes the
  place of the one that has waited longest without sending a request (that one is answered
  503 and closed); when every open connection has a request in progress, the new one is
  answered 503 and closed at once, before any byte of it is read;
* a descriptor reserve: a connection whose descriptor reaches `fd_ceiling` (the open-file
  limit less the reserve) is answered 503 and closed at once, so the process keeps
  descriptors for its database and accept() never fails for want of one.

A request being processed (all of it received) has no deadline here: tool calls take as long
as they take. The idle keep-alive timeout is uvicorn's own.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import h11
import uvicorn
from starlette.types import ASGIApp
from uvicorn.protocols.http.h11_impl import H11Protocol

try:
    import resource
except ImportError:  # Windows
    resource = None  # type: ignore[assignment]

if TYPE_CHECKING:
    from cpersona.config import Settings

log = logging.getLogger("cpersona.http")

#: Descriptors kept for everything but connections: the database (a reader per worker thread,
#: each with its WAL and shared-memory files), the vector indexes, the model, the log; and room
#: for the connections accepted in one burst before the first of them can be refused. At most
#: half the open-file limit.
FD_RESERVE = 256

_REFUSED = (
    b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n"
    b"content-length: 32\r\nretry-after: 1\r\nconnection: close\r\n\r\n"
    b'{"error":"too_many_connections"}'
)
_TIMED_OUT = (
    b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\n"
    b"content-length: 27\r\nconnection: close\r\n\r\n"
    b'{"error":"request_timeout"}'
)


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    header_timeout: float
    body_timeout: float
    keepalive_timeout: float
    max_connections: int
    #: A connection whose descriptor number reaches this is refused (descriptors are handed
    #: out lowest first, so the number tells how many are open).
    fd_ceiling: int
    #: The listen queue, and so the most connections asyncio accepts in one event-loop tick
    #: (it accepts up to this many before any of them can be refused): a quarter of the reserve.
    backlog: int

    @classmethod
    def from_settings(cls, settings: Settings) -> ConnectionLimits:
        wanted = settings.http_max_connections + FD_RESERVE
        soft = raise_descriptor_limit(wanted)
        reserve = min(FD_RESERVE, soft // 2)
        ceiling = soft - reserve
        if ceiling < settings.http_max_connections:
            log.warning(
                "the open-file limit (%d) leaves room for %d connections, fewer than "
                "CPERSONA_HTTP_MAX_CONNECTIONS=%d: raise it (ulimit -n) to allow them all",
                soft,
                ceiling,
                settings.http_max_connections,
            )
        return cls(
            header_timeout=settings.http_header_timeout_seconds,
            body_timeout=settings.http_body_timeout_seconds,
            keepalive_timeout=settings.http_keepalive_timeout_seconds,
            max_connections=settings.http_max_connections,
            fd_ceiling=ceiling,
            backlog=max(16, reserve // 4),
        )


def uvicorn_config(app: ASGIApp, settings: Settings) -> uvicorn.Config:
    """uvicorn's configuration for cpersona: the guarded h11 protocol and its limits."""
    limits = ConnectionLimits.from_settings(settings)
    return uvicorn.Config(
        app,
        http=guarded_protocol(limits),
        timeout_keep_alive=limits.keepalive_timeout,  # type: ignore[arg-type]  # a float works
        backlog=limits.backlog,
        lifespan="on",
        log_config=None,  # keep cpersona's stderr format; uvicorn's loggers propagate to it
        access_log=False,
        server_header=False,
        timeout_graceful_shutdown=5,
    )


def raise_descriptor_limit(wanted: int) -> int:
    """Raise the soft open-file limit toward `wanted` (never past the hard limit); the result."""
    if resource is None:  # not POSIX: no limit to read or raise
        return wanted
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= wanted:
        return wanted if soft == resource.RLIM_INFINITY else soft
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (ValueError, OSError):
        return soft
    return target


def guarded_protocol(limits: ConnectionLimits) -> type[H11Protocol]:
    """uvicorn's h11 protocol class with `limits` enforced (pass it as `http=` to uvicorn)."""

    class Guarded(_GuardedH11):
        pass

    Guarded.limits = limits
    Guarded.waiting = {}
    return Guarded


class _GuardedH11(H11Protocol):
    limits: ClassVar[ConnectionLimits]
    #: Open connections with no request in progress (h11 has not yet read a whole request
    #: line and headers: new, trickling, or kept alive between requests), oldest first.
    waiting: ClassVar[dict[_GuardedH11, None]]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._deadline: asyncio.TimerHandle | None = None
        self._phase = ""  # "headers", "body" or "" (no deadline running)
        self._refused = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        sock = transport.get_extra_info("socket")
        fd = sock.fileno() if sock is not None else -1
        if fd >= self.limits.fd_ceiling:
            # Descriptors are running out: this one is given back at once (making room
            # instead would hold it until the other's close completes, while accept() goes on).
            self._refuse(transport)
            return
        if len(self.connections) >= self.limits.max_connections:
            # Make room by closing the connection that has waited longest without sending a
            # request: a flood of silent connections then churns itself, and a client that
            # sends its request promptly is still served. Refuse only when every open
            # connection has a request in progress.
            oldest = next(iter(self.waiting), None)
            if oldest is None:
                self._refuse(transport)
                return
            oldest._close_for_room()
        super().connection_made(transport)  # type: ignore[arg-type]
        self.waiting[self] = None
        self._arm("headers", self.limits.header_timeout)

    def _refuse(self, transport: asyncio.BaseTransport) -> None:
        self._refused = True
        assert isinstance(transport, asyncio.WriteTransport)
        transport.write(_REFUSED)
        transport.close()
        log.warning(
            "refused a connection (503): %d open, at most %d (CPERSONA_HTTP_MAX_CONNECTIONS "
            "and what the open-file limit leaves), none of them waiting to be replaced",
            len(self.connections),
            min(self.limits.max_connections, self.limits.fd_ceiling),
        )

    def _close_for_room(self) -> None:
        self.waiting.pop(self, None)
        self._disarm()
        if not self.transport.is_closing():
            self.transport.write(_REFUSED)
            self.transport.close()
        log.warning(
            "connection limit reached: closed the connection that waited longest without "
            "a request (503) to make room for a new one"
        )

    def connection_lost(self, exc: Exception | None) -> None:
        if self._refused:
            return
        self.waiting.pop(self, None)
        self._disarm()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return
        if not self._phase and self.conn.their_state is h11.IDLE:
            # The first bytes of the next request on a kept-alive connection.
            self._arm("headers", self.limits.header_timeout)
        super().data_received(data)
        self._follow()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        # Between requests the idle keep-alive timer (uvicorn's) is the one that runs.
        self._follow()

    def _follow(self) -> None:
        """Move the deadline along with h11's view of where the request is."""
        state = self.conn.their_state
        if state is not h11.IDLE:
            self.waiting.pop(self, None)
        elif self not in self.waiting and not self.transport.is_closing():
            self.waiting[self] = None  # kept alive after a response: newest of the waiting
        if state is h11.SEND_BODY and self._phase != "body":
            self._arm("body", self.limits.body_timeout)
        elif state is not h11.IDLE and state is not h11.SEND_BODY:
            self._disarm()  # all of it received (or the connection is done): no deadline
        elif state is h11.IDLE and self._phase == "body":
            self._disarm()

    def _arm(self, phase: str, seconds: float) -> None:
        self._disarm()
        self._phase = phase
        self._deadline = self.loop.call_later(seconds, self._expired, phase)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
        self._phase = ""

    def _expired(self, phase: str) -> None:
        self._deadline = None
        self._phase = ""
        if self.transport.is_closing():
            return
        if phase == "headers" and self.conn.our_state is h11.IDLE:
            self.transport.write(_TIMED_OUT)
        log.info(
            "closed a connection that sent no complete request %s within %ss",
            phase,
            self.limits.header_timeout if phase == "headers" else self.limits.body_timeout,
        )
        self.transport.close()
