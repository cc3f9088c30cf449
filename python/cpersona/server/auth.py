"""Who may talk to the HTTP transport: the bearer check and the request body budget (§11.1-11.2).

Both are plain ASGI middleware around the SDK's streamable-HTTP app. `BearerAuth` resolves the
caller (one token, or the ACL file's tokens) before anything of the request is read, answers
401 otherwise, and records the authenticated client id in `CLIENT_ID` for the ACL guard: the
MCP server handles a stateless request in tasks started from the request's own task, so they
inherit the value. `BodyBudget` counts the body bytes actually received.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import logging
import threading
from collections import deque
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from cpersona.server.oauth import SUBJECT

if TYPE_CHECKING:
    from cpersona.config import Settings
    from cpersona.server.acl import AclConfig
    from cpersona.server.oauth_tokens import Verifier

log = logging.getLogger("cpersona.http")

#: The client id the current request authenticated as (ACL mode), else None.
CLIENT_ID: ContextVar[str | None] = ContextVar("cpersona_client_id", default=None)

_FORWARDING_HEADERS = frozenset({
    b"x-forwarded-for", b"x-forwarded-proto", b"x-forwarded-host", b"forwarded", b"via",
    b"x-real-ip", b"true-client-ip", b"cf-connecting-ip",
})  # fmt: skip


def current_client() -> str | None:
    return CLIENT_ID.get()


def preflight_refusal(settings: Settings, acl: AclConfig | None) -> str | None:
    """The one-line refusal to serve HTTP with no authentication at all, or None (§11.2).

    ACL mode is authentication, so it never refuses. The bind address does not matter:
    loopback is not a security boundary (any local process or a DNS-rebinding page reaches it).
    """
    if acl is not None or settings.auth_token or settings.allow_unauthenticated_http:
        return None
    return (
        "cpersona: refusing to serve streamable-http without authentication: set "
        "CPERSONA_AUTH_TOKEN (or CPERSONA_ACL_FILE), or CPERSONA_ALLOW_UNAUTHENTICATED_HTTP=true "
        "to accept anyone who can reach the port"
    )


def bearer_token(scope: Scope) -> bytes | None:
    """The credential of `Authorization: Bearer <t>` as raw bytes (scheme word in any case)."""
    for name, value in scope.get("headers", ()):
        if name == b"authorization":
            scheme, _, rest = value.strip().partition(b" ")
            if scheme.lower() != b"bearer":
                return None
            token = rest.strip(b" \t")
            return token or None
    return None


class BearerAuth:
    """401 unless the request proves who it is; sets `CLIENT_ID` in ACL mode.

    Exactly one mode: `acl` (its clients' tokens), `token` (the single legacy token; ignored
    when `acl` is given), or neither (unauthenticated, by explicit opt-out). CORS preflights
    (OPTIONS) and the lifespan pass untouched; a websocket is closed with 1008. In ACL mode an
    unmatched bearer goes to `oauth` (server/oauth.py) when given; `challenge` is the
    `WWW-Authenticate` value of a 401.
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        token: str | None,
        acl: AclConfig | None,
        oauth: Verifier | None = None,
        challenge: bytes = b"Bearer",
    ) -> None:
        self.app = app
        self.acl = acl
        self.token = None if acl is not None else (token.encode("utf-8") if token else None)
        self.oauth = oauth if acl is not None else None
        self.challenge = challenge
        self._warned_exposure = threading.Event()

    @property
    def open(self) -> bool:
        return self.acl is None and self.token is None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "lifespan" or (kind == "http" and scope.get("method") == "OPTIONS"):
            await self.app(scope, receive, send)
            return
        if self.open:
            self._warn_if_exposed(scope)
            await self.app(scope, receive, send)
            return
        presented = bearer_token(scope)
        known, client_id = self._identify(presented)
        subject = None
        if not known and presented is not None and self.oauth is not None:
            identity = await self.oauth.identify(presented)
            if identity is not None:
                known, client_id, subject = True, identity.client_id, identity.subject
        if not known:
            if kind == "websocket":
                await send({"type": "websocket.close", "code": 1008})
            else:
                await _json(
                    send, 401, {"error": "unauthorized"}, [(b"www-authenticate", self.challenge)]
                )
            return
        reset = CLIENT_ID.set(client_id)
        reset_subject = SUBJECT.set(subject)
        try:
            await self.app(scope, receive, send)
        finally:
            SUBJECT.reset(reset_subject)
            CLIENT_ID.reset(reset)

    def _identify(self, presented: bytes | None) -> tuple[bool, str | None]:
        """(authenticated, the ACL client id or None in single-token mode)."""
        if presented is None:
            return False, None
        if self.acl is not None:
            client_id = self.acl.identify(presented)
            return client_id is not None, client_id
        assert self.token is not None
        return hmac.compare_digest(presented, self.token), None

    def _warn_if_exposed(self, scope: Scope) -> None:
        if self._warned_exposure.is_set():
            return
        peer = scope.get("client")
        host = peer[0] if peer else None
        forwarded = any(name in _FORWARDING_HEADERS for name, _ in scope.get("headers", ()))
        if forwarded or not _is_loopback(host):
            self._warned_exposure.set()
            log.warning(
                "unauthenticated HTTP request %s: anyone who reaches this port can read and "
                "write every agent's memories; set CPERSONA_AUTH_TOKEN or CPERSONA_ACL_FILE "
                "(warned once)",
                "carrying a forwarding header (behind a proxy?)"
                if forwarded
                else f"from non-loopback peer {host}",
            )


def _is_loopback(host: str | None) -> bool:
    if not host:
        return False
    try:
        addr = ipaddress.ip_address(host)
    except ValueError:
        return False
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        addr = addr.ipv4_mapped
    return addr.is_loopback


class BodyBudget:
    """Counts received body bytes across chunks against `max_bytes` (not the declared length).

    `warn` logs at the 1st, 10th, 100th, ... oversized request and serves it; `reject` answers
    413 `{"error": "payload_too_large", "max_bytes": n}` as soon as the count passes the budget
    and reads no further (the app behind never sees that request); `off` does nothing.
    """

    def __init__(self, app: ASGIApp, *, max_bytes: int, mode: str) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.mode = mode
        self._oversized = 0
        self._lock = threading.Lock()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self.mode == "off":
            await self.app(scope, receive, send)
        elif self.mode == "reject":
            await self._reject_over(scope, receive, send)
        else:
            await self._warn_over(scope, receive, send)

    async def _reject_over(self, scope: Scope, receive: Receive, send: Send) -> None:
        # The body is read before the app runs: the SDK reads it whole before acting anyway,
        # and an app cut off mid-read would log the client's "disconnect" as its own error.
        held: deque[Message] = deque()
        seen = 0
        while True:
            message = await receive()
            held.append(message)
            if message["type"] != "http.request":
                break
            seen += len(message.get("body", b""))
            if seen > self.max_bytes:
                log.warning(
                    "refused a request body over CPERSONA_HTTP_MAX_BODY_BYTES=%d (413)",
                    self.max_bytes,
                )
                await _json(send, 413, {"error": "payload_too_large", "max_bytes": self.max_bytes})
                return
            if not message.get("more_body", False):
                break

        async def replay() -> Message:
            return held.popleft() if held else await receive()

        await self.app(scope, replay, send)

    async def _warn_over(self, scope: Scope, receive: Receive, send: Send) -> None:
        seen = 0
        warned = False

        async def counted() -> Message:
            nonlocal seen, warned
            message = await receive()
            if message["type"] == "http.request" and not warned:
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    warned = True
                    self._warn(seen)
            return message

        await self.app(scope, counted, send)

    def _warn(self, seen: int) -> None:
        with self._lock:
            self._oversized += 1
            n = self._oversized
        if _is_power_of_ten(n):
            log.warning(
                "a request body passed CPERSONA_HTTP_MAX_BODY_BYTES=%d (%d bytes so far); served "
                "anyway because CPERSONA_HTTP_BODY_LIMIT_MODE=warn (oversized request #%d; logged "
                "at the 1st, 10th, 100th, ...)",
                self.max_bytes,
                seen,
                n,
            )


def _is_power_of_ten(n: int) -> bool:
    while n % 10 == 0 and n > 1:
        n //= 10
    return n == 1


async def _json(
    send: Send,
    status: int,
    payload: dict[str, Any],
    headers: list[tuple[bytes, bytes]] | None = None,
) -> None:
    body = json.dumps(payload).encode("utf-8")
    await send({
        "type": "http.response.start",
        "status": status,
        "headers": [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode("ascii")),
            *(headers or []),
        ],
    })  # fmt: skip
    await send({"type": "http.response.body", "body": body})
