"""JWT access tokens of the OAuth resource server (surface.md §11.5).

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
import threading
import time
import urllib.request
from collections.abc import Callable, Mapping
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

from cpersona.server.oauth import OAuthConfig, Subject, principal_id

if TYPE_CHECKING:
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


class Refused(Exception):
    """A token is not accepted; the message is for the operator's log only."""


Fetch = Callable[[str], Mapping[str, Any]]


def fetch_json(url: str) -> Mapping[str, Any]:
    """GET `url` and parse a JSON object (bounded in time and size)."""
    # urllib would also open file: and ftp: URLs; a jwks_uri comes from the network.
    if urlsplit(url).scheme not in ("http", "https"):
        raise Refused(f"{url!r} is not an http(s) URL")
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

    public: RSAPublicKey | EllipticCurvePublicKey
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
            if not isinstance(parsed.key, RSAPublicKey | EllipticCurvePublicKey):
                continue  # a private or symmetric key has no place in a published key set
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
    ) -> None:
        self.config = config
        self.acl = acl
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
