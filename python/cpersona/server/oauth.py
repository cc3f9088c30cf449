"""The OAuth resource server of the HTTP transport (surface.md §11.5): its settings and the
metadata route; the token checks are in `oauth_tokens.py` (which alone imports the JOSE library,
so stdio never pays for it).

Discovery (RFC 9728): with `CPERSONA_OAUTH_RESOURCE` and `CPERSONA_OAUTH_AUTHORIZATION_SERVERS`
set, `ResourceMetadata` serves the protected-resource metadata document, unauthenticated, at
`/.well-known/oauth-protected-resource<resource path>`, and every 401 names it in its
`WWW-Authenticate` challenge.
"""

from __future__ import annotations

import json
import logging
import re
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from cpersona.errors import ConfigError

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Receive, Scope, Send

    from cpersona.config import Settings
    from cpersona.server.acl import AclConfig

log = logging.getLogger("cpersona.oauth")

WELL_KNOWN = "/.well-known/oauth-protected-resource"
#: RFC 6749 §3.3 scope-token: printable ASCII except space, `"` and `\`.
_SCOPE_TOKEN = re.compile(r"[\x21\x23-\x5b\x5d-\x7e]+")
_LIST_SEPARATORS = re.compile(r"[\s,]+")
_OAUTH_VARS = (
    "CPERSONA_OAUTH_RESOURCE",
    "CPERSONA_OAUTH_AUTHORIZATION_SERVERS",
    "CPERSONA_OAUTH_SCOPES",
    "CPERSONA_OAUTH_JWKS_URI",
)


@dataclass(frozen=True, slots=True)
class Subject:
    """Who a verified token speaks for: its issuer and `sub` (per-subject aliases key on it)."""

    issuer: str
    subject: str


#: The verified OAuth subject of the current request, else None (static tokens, stdio).
SUBJECT: ContextVar[Subject | None] = ContextVar("cpersona_oauth_subject", default=None)


def current_subject() -> Subject | None:
    return SUBJECT.get()


def principal_id(issuer: str, client_id: str) -> str:
    """The ACL client id of an OAuth client (surface.md §11.5)."""
    return f"oauth:{issuer}:{client_id}"


# --------------------------------------------------------------------------- configuration


@dataclass(frozen=True, slots=True)
class OAuthConfig:
    """Discovery settings, validated; `verify` says whether tokens are accepted too."""

    resource: str
    issuers: tuple[str, ...]
    scopes: tuple[str, ...]
    jwks_uri: str | None
    verify: bool

    @property
    def metadata_path(self) -> str:
        path = urlsplit(self.resource).path
        return WELL_KNOWN + ("" if path in ("", "/") else path)

    @property
    def metadata_url(self) -> str:
        parts = urlsplit(self.resource)
        return f"{parts.scheme}://{parts.netloc}{self.metadata_path}"

    def challenge(self) -> bytes:
        """The `WWW-Authenticate` value of every 401 while discovery is on."""
        value = f'Bearer resource_metadata="{self.metadata_url}"'
        if self.scopes:
            value += f', scope="{" ".join(self.scopes)}"'
        return value.encode("ascii")

    def document(self) -> dict[str, Any]:
        """The RFC 9728 metadata: the configured strings exactly as the operator wrote them."""
        doc: dict[str, Any] = {
            "resource": self.resource,
            "authorization_servers": list(self.issuers),
            "bearer_methods_supported": ["header"],
        }
        if self.scopes:
            doc["scopes_supported"] = list(self.scopes)
        return doc


def load_oauth(settings: Settings, acl: AclConfig | None) -> OAuthConfig | None:
    """The OAuth configuration, or None when no `CPERSONA_OAUTH_*` variable is set.

    2.5.x turns a half-made configuration into a warning and runs without it; here it refuses
    start-up, because the operator who set one of these variables expects OAuth to be in force.

    Raises:
        ConfigError: one line naming the variable and the defect.
    """
    resource = (settings.oauth_resource or "").strip()
    servers = _split(settings.oauth_authorization_servers)
    scopes_raw = _split(settings.oauth_scopes)
    jwks_uri = (settings.oauth_jwks_uri or "").strip() or None
    if not (resource or servers or scopes_raw or jwks_uri):
        return None
    if not resource or not servers:
        missing = "CPERSONA_OAUTH_RESOURCE" if not resource else _OAUTH_VARS[1]
        raise ConfigError(
            f"{missing} is not set: OAuth discovery needs both CPERSONA_OAUTH_RESOURCE and "
            "CPERSONA_OAUTH_AUTHORIZATION_SERVERS (or unset every CPERSONA_OAUTH_* variable)"
        )
    _require_url("CPERSONA_OAUTH_RESOURCE", resource)
    for issuer in servers:
        _require_url("CPERSONA_OAUTH_AUTHORIZATION_SERVERS", issuer)
    if jwks_uri is not None:
        _require_url("CPERSONA_OAUTH_JWKS_URI", jwks_uri)
        if len(servers) != 1:
            raise ConfigError(
                f"CPERSONA_OAUTH_JWKS_URI={jwks_uri!r} needs exactly one issuer in "
                f"CPERSONA_OAUTH_AUTHORIZATION_SERVERS (it names {len(servers)}); without it each "
                "issuer's keys are discovered from its own metadata"
            )
    scopes = tuple(s for s in scopes_raw if _SCOPE_TOKEN.fullmatch(s))
    dropped = [s for s in scopes_raw if s not in scopes]
    if dropped:
        log.warning(
            "CPERSONA_OAUTH_SCOPES: %s not RFC 6749 scope tokens, left out of the metadata",
            ", ".join(map(repr, dropped)),
        )
    verify = acl is not None
    if not verify:
        log.warning(
            "OAuth discovery is on but CPERSONA_ACL_FILE is not set: the metadata is published, "
            "yet no OAuth token is accepted (verification needs ACL mode to map clients to grants)"
        )
    log.info(
        "OAuth: resource %s, issuers %s; bearer JWTs %s",
        resource,
        ", ".join(servers),
        "verified against each issuer's keys" if verify else "not accepted (no ACL file)",
    )
    return OAuthConfig(resource, servers, scopes, jwks_uri, verify)


def _split(raw: str | None) -> tuple[str, ...]:
    seen: dict[str, None] = {}
    for item in _LIST_SEPARATORS.split(raw or ""):
        if item:
            seen.setdefault(item)
    return tuple(seen)


def _require_url(name: str, value: str) -> None:
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"{name}: {value!r} is not an http(s) URL")
    if parts.scheme == "http" and parts.hostname not in ("127.0.0.1", "localhost", "::1"):
        log.warning("%s: %s is plain http: anyone on the path can forge its keys", name, value)


# --------------------------------------------------------------------------- the metadata route


class ResourceMetadata:
    """Serves the metadata document at its exact path, before any authentication."""

    def __init__(self, app: ASGIApp, config: OAuthConfig) -> None:
        self.app = app
        self.path = config.metadata_path
        self.body = json.dumps(config.document(), ensure_ascii=False).encode("utf-8")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("path") != self.path:
            await self.app(scope, receive, send)
            return
        method = scope.get("method")
        allow = (b"allow", b"GET, HEAD, OPTIONS")
        if method in ("GET", "HEAD"):
            headers = [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(self.body)).encode("ascii")),
                (b"cache-control", b"public, max-age=3600"),
            ]
            body = self.body if method == "GET" else b""
            await _respond(send, 200, headers, body)
        elif method == "OPTIONS":
            await _respond(send, 204, [allow], b"")
        else:
            await _respond(send, 405, [allow, (b"content-length", b"0")], b"")


async def _respond(
    send: Send, status: int, headers: list[tuple[bytes, bytes]], body: bytes
) -> None:
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def warn_unreachable_clients(acl: AclConfig, config: OAuthConfig | None) -> None:
    """Warn about `token: null` rows (other than `local`) that no request can act as."""
    from cpersona.server.acl import LOCAL

    verifying = config is not None and config.verify
    prefixes = tuple(principal_id(i, "") for i in config.issuers) if config is not None else ()
    for client in acl.clients:
        if client.token is not None or client.client_id == LOCAL:
            continue
        if not verifying:
            log.warning(
                "ACL client %r has no token: only a verified OAuth token could act as it, and "
                "OAuth verification is off (CPERSONA_OAUTH_RESOURCE and "
                "CPERSONA_OAUTH_AUTHORIZATION_SERVERS on streamable-http)",
                client.client_id,
            )
        elif not client.client_id.startswith(prefixes):
            log.warning(
                "ACL client %r has no token and is not oauth:<issuer>:<client_id> of a "
                "configured issuer: no request can act as it",
                client.client_id,
            )
