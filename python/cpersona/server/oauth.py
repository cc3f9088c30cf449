"""The OAuth resource server of the HTTP transport (surface.md §11.5).

Discovery (RFC 9728): with `CPERSONA_OAUTH_RESOURCE` and `CPERSONA_OAUTH_AUTHORIZATION_SERVERS`
set, `ResourceMetadata` serves the protected-resource metadata document, unauthenticated, at
`/.well-known/oauth-protected-resource<resource path>`, and every 401 names it in its
`WWW-Authenticate` challenge.

Verification (ACL mode only): a bearer that is no static ACL token is read as a JWT access token
and checked by PyJWT (never by hand): an asymmetric algorithm from `ALGORITHMS`, an issuer from
the configured list, a signature by a key of that issuer's JWKS, `aud` the resource, `exp`,
`aud`, `iss` and `sub` present, no `act`, a `client_id` or `azp`. The caller becomes the ACL
principal `oauth:<issuer>:<client_id>`, which the ACL file must list. Every refusal is the same
plain 401 for the caller and one WARNING line for the operator.

A JWKS is fetched on first use (from `CPERSONA_OAUTH_JWKS_URI` or the `jwks_uri` of the
issuer's OAuth / OpenID metadata), kept for `JWKS_TTL`, and fetched again earlier only for a
`kid` it does not hold, at most once per `JWKS_REFETCH_FLOOR`: a rotation at the issuer is
picked up, and tokens with made-up key ids cannot make the server hammer the issuer.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
import urllib.request
from collections.abc import Callable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import anyio
import jwt
from cryptography.hazmat.primitives.asymmetric.ec import (
    SECP256R1,
    SECP384R1,
    EllipticCurvePublicKey,
)
from cryptography.hazmat.primitives.asymmetric.rsa import RSAPublicKey
from starlette.types import ASGIApp, Receive, Scope, Send

from cpersona.errors import ConfigError

if TYPE_CHECKING:
    from cpersona.config import Settings
    from cpersona.server.acl import AclConfig

log = logging.getLogger("cpersona.oauth")

#: The only signature algorithms a token may use: never `none`, never a shared-secret HS*.
ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384")
_EC_CURVES = {"ES256": SECP256R1, "ES384": SECP384R1}
JWKS_TTL = 3600.0
JWKS_REFETCH_FLOOR = 60.0
#: Clock skew tolerated on `exp`, `nbf` and `iat`.
LEEWAY = 30
FETCH_TIMEOUT = 10.0
_FETCH_MAX_BYTES = 1 << 20
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


# --------------------------------------------------------------------------- key sets


class Refused(Exception):
    """A token is not accepted; the message is for the operator's log only."""


Fetch = Callable[[str], Mapping[str, Any]]


def fetch_json(url: str) -> Mapping[str, Any]:
    """GET `url` and parse a JSON object (bounded in time and size)."""
    request = urllib.request.Request(url, headers={"Accept": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=FETCH_TIMEOUT) as response:
            body = response.read(_FETCH_MAX_BYTES + 1)
    except (OSError, ValueError) as exc:  # URLError and HTTPError are OSErrors
        raise Refused(f"could not fetch {url}: {exc}") from None
    if len(body) > _FETCH_MAX_BYTES:
        raise Refused(f"{url} answered more than {_FETCH_MAX_BYTES} bytes")
    try:
        doc = json.loads(body)
    except ValueError:
        raise Refused(f"{url} did not answer JSON") from None
    if not isinstance(doc, dict):
        raise Refused(f"{url} did not answer a JSON object")
    return doc


@dataclass(frozen=True, slots=True)
class SigningKey:
    """A public key of an issuer's JWKS and the `alg` the JWKS restricts it to, if any."""

    public: Any
    alg: str | None

    def fits(self, alg: str) -> bool:
        """Whether this key may check an `alg` signature: the key type, the curve, its `alg`."""
        if self.alg is not None and self.alg != alg:
            return False
        if alg.startswith(("RS", "PS")):
            return isinstance(self.public, RSAPublicKey)
        curve = _EC_CURVES[alg]
        return isinstance(self.public, EllipticCurvePublicKey) and isinstance(
            self.public.curve, curve
        )


class KeySet:
    """One issuer's signing keys by `kid`, fetched lazily and refreshed as the module says."""

    def __init__(
        self,
        issuer: str,
        jwks_uri: str | None,
        *,
        fetch: Fetch = fetch_json,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.issuer = issuer
        self.jwks_uri = jwks_uri
        self._fetch = fetch
        self._clock = clock
        self._lock = threading.Lock()
        self._keys: dict[str | None, list[SigningKey]] = {}
        self._fetched_at: float | None = None
        self._attempted_at: float | None = None

    def keys(self, kid: str | None) -> tuple[list[SigningKey], str | None]:
        """The keys a token with this `kid` may be signed by (none: refused), and why a fetch
        made for this call failed (the last good set is kept: the issuer may be back soon)."""
        with self._lock:
            now = self._clock()
            stale = self._fetched_at is None or now - self._fetched_at >= JWKS_TTL
            failure = None
            if stale or kid not in self._keys:
                due = self._attempted_at is None or now - self._attempted_at >= JWKS_REFETCH_FLOOR
                if due:
                    self._attempted_at = now
                    try:
                        self._keys = self._load()
                        self._fetched_at = now
                    except Refused as exc:
                        failure = str(exc)
            return list(self._keys.get(kid, ())), failure

    def _load(self) -> dict[str | None, list[SigningKey]]:
        doc = self._fetch(self.jwks_uri or self._discover())
        raw = doc.get("keys")
        if not isinstance(raw, list):
            raise Refused("the JWKS has no keys list")
        by_kid: dict[str | None, list[SigningKey]] = {}
        for entry in raw:
            if not isinstance(entry, dict) or entry.get("use", "sig") != "sig":
                continue
            try:
                parsed = jwt.PyJWK(entry)
            except (jwt.PyJWTError, ValueError, TypeError, KeyError):
                continue  # a key type this server never accepts (oct, OKP, ...)
            alg = entry.get("alg")
            key = SigningKey(parsed.key, alg if isinstance(alg, str) else None)
            kid = entry.get("kid")
            # A token without `kid` may be checked against every key of the set.
            by_kid.setdefault(kid if isinstance(kid, str) else None, []).append(key)
            by_kid.setdefault(None, []).append(key)
        if not by_kid:
            raise Refused("the JWKS holds no usable signing key")
        return by_kid

    def _discover(self) -> str:
        """`jwks_uri` from RFC 8414 metadata, else from OpenID Connect discovery."""
        parts = urlsplit(self.issuer)
        path = "" if parts.path in ("", "/") else parts.path
        origin = f"{parts.scheme}://{parts.netloc}"
        candidates = (
            f"{origin}/.well-known/oauth-authorization-server{path}",
            self.issuer.rstrip("/") + "/.well-known/openid-configuration",
        )
        problems = []
        for url in candidates:
            try:
                meta = self._fetch(url)
            except Refused as exc:
                problems.append(str(exc))
                continue
            # RFC 8414 §3.3 / OIDC Discovery §4.3: the document must be the issuer's own.
            if meta.get("issuer") != self.issuer:
                problems.append(f"{url} names issuer {meta.get('issuer')!r}")
                continue
            uri = meta.get("jwks_uri")
            if isinstance(uri, str) and uri:
                return uri
            problems.append(f"{url} has no jwks_uri")
        raise Refused("; ".join(problems))


# --------------------------------------------------------------------------- verification


@dataclass(frozen=True, slots=True)
class Identity:
    """A verified caller: the ACL client id and the subject the token speaks for."""

    client_id: str
    subject: Subject


class Verifier:
    """Checks bearer JWTs against the configured issuers; see the module docstring."""

    def __init__(
        self,
        config: OAuthConfig,
        acl: AclConfig,
        *,
        fetch: Fetch = fetch_json,
        clock: Callable[[], float] = time.monotonic,
        now: Callable[[], float] = time.time,
    ) -> None:
        self.config = config
        self.acl = acl
        self._now = now
        self._keysets = {
            issuer: KeySet(issuer, config.jwks_uri, fetch=fetch, clock=clock)
            for issuer in config.issuers
        }

    async def identify(self, presented: bytes) -> Identity | None:
        """The caller behind `presented`, or None (refused; logged once)."""
        return await anyio.to_thread.run_sync(self.check, presented)

    def check(self, presented: bytes) -> Identity | None:
        """`identify` in the calling thread; one log line per refusal, whatever the cause."""
        notes: list[str] = []
        try:
            identity = self._verify(presented, notes)
        except Refused as exc:
            log.warning("OAuth token refused (401): %s", "; ".join([str(exc), *notes]))
            return None
        for note in notes:
            log.warning("OAuth token accepted with the last good key set; %s", note)
        return identity

    def _verify(self, presented: bytes, notes: list[str]) -> Identity:
        try:
            token = presented.decode("ascii")
            header = jwt.get_unverified_header(token)
            unverified = jwt.decode(token, options={"verify_signature": False})
        except (UnicodeDecodeError, jwt.PyJWTError) as exc:
            raise Refused(f"not a JWT ({exc})") from None
        alg = header.get("alg")
        if alg not in ALGORITHMS:
            raise Refused(f"algorithm {alg!r} is not accepted")
        issuer = unverified.get("iss")
        keyset = self._keysets.get(issuer) if isinstance(issuer, str) else None
        if keyset is None:
            raise Refused(f"issuer {issuer!r} is not in CPERSONA_OAUTH_AUTHORIZATION_SERVERS")
        kid = header.get("kid")
        if kid is not None and not isinstance(kid, str):
            raise Refused("the kid header is not a string")
        keys, failure = keyset.keys(kid)
        if failure is not None:
            notes.append(f"fetching the key set of {issuer} failed: {failure}")
        candidates = [k for k in keys if k.fits(alg)]
        if not candidates:
            raise Refused(f"issuer {issuer} has no {alg} key with kid {kid!r}")
        claims = self._decode(token, alg, candidates, issuer)
        if "act" in claims:
            raise Refused("a delegated token (act claim) is not accepted")
        subject = claims.get("sub")
        if not isinstance(subject, str) or not subject:
            raise Refused("sub is empty or not a string")
        client = claims.get("client_id", claims.get("azp"))
        if not isinstance(client, str) or not client:
            raise Refused("the token names no client_id or azp")
        principal = principal_id(issuer, client)
        if self.acl.client(principal) is None:
            raise Refused(f"client {principal!r} is not listed in the ACL file")
        return Identity(principal, Subject(issuer, subject))

    def _decode(
        self, token: str, alg: str, candidates: list[SigningKey], issuer: str
    ) -> dict[str, Any]:
        last: Exception | None = None
        for key in candidates:
            try:
                return jwt.decode(
                    token,
                    key.public,
                    algorithms=[alg],
                    audience=self.config.resource,
                    issuer=issuer,
                    leeway=LEEWAY,
                    options={"require": ["exp", "aud", "iss", "sub"]},
                )
            except jwt.InvalidSignatureError as exc:
                last = exc  # another key without kid may still match
            except (jwt.PyJWTError, ValueError, TypeError) as exc:
                raise Refused(f"{type(exc).__name__}: {exc}") from None
        raise Refused(f"{type(last).__name__}: {last}")


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
