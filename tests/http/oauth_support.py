"""A test OAuth authorization server on 127.0.0.1: metadata, a JWKS and tokens signed here.

`TestIssuer` makes its own RSA and EC keys, publishes the public halves at its `jwks_uri` (found
through RFC 8414 or OpenID Connect discovery, as chosen) and signs access tokens with them.
`rotate()` changes which keys it publishes; `fetches` counts the JWKS requests it answered.
The helpers that build broken tokens (`unsigned`, `hs256_with_public_key`, `tamper`) exist to
prove the server refuses them.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
import uuid
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.algorithms import ECAlgorithm, RSAAlgorithm
from support.local_http import LocalServer

RESOURCE = "https://memory.example.test/mcp"

_EC_CURVES = {"ES256": ec.SECP256R1, "ES384": ec.SECP384R1}


@dataclass
class Key:
    kid: str
    alg: str
    private: Any

    @classmethod
    def make(cls, alg: str, kid: str | None = None) -> Key:
        if alg.startswith("ES"):
            private: Any = ec.generate_private_key(_EC_CURVES[alg]())
        else:
            private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        return cls(kid or f"{alg.lower()}-{uuid.uuid4().hex[:8]}", alg, private)

    def jwk(self) -> dict[str, Any]:
        codec = ECAlgorithm if self.alg.startswith("ES") else RSAAlgorithm
        out = codec.to_jwk(self.private.public_key(), as_dict=True)
        return {**out, "kid": self.kid, "use": "sig"}

    def public_pem(self) -> bytes:
        return self.private.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )


class TestIssuer:
    """One authorization server; `url` is its issuer identifier."""

    __test__ = False  # not a pytest class

    def __init__(self, *, algs: tuple[str, ...] = ("RS256",), discovery: str = "oidc") -> None:
        self.keys = [Key.make(alg) for alg in algs]
        self.published = list(self.keys)
        self.discovery = discovery
        self.fetches = 0
        self.jwks_path = "/jwks"
        self._extra: dict[str, list[Key]] = {}
        issuer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = issuer._answer(self.path)
                if body is None:
                    self.send_response(404)
                    self.send_header("content-length", "0")
                    self.end_headers()
                    return
                data = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = LocalServer(Handler)
        self.url = self._server.base

    def close(self) -> None:
        self._server.close()

    def serve_keys(self, path: str, keys: list[Key]) -> str:
        """Publish `keys` at another path too (a JWKS override); returns its URL."""
        self._extra[path] = keys
        return self.url + path

    def _answer(self, path: str) -> dict[str, Any] | None:
        meta = {"issuer": self.url, "jwks_uri": self.url + self.jwks_path}
        if path == "/.well-known/openid-configuration" and self.discovery == "oidc":
            return meta
        if path == "/.well-known/oauth-authorization-server" and self.discovery == "rfc8414":
            return meta
        if path == self.jwks_path:
            self.fetches += 1
            return {"keys": [k.jwk() for k in self.published]}
        if path in self._extra:
            return {"keys": [k.jwk() for k in self._extra[path]]}
        return None

    def rotate(self, alg: str = "RS256") -> Key:
        """Stop publishing every current key and publish a new one."""
        fresh = Key.make(alg)
        self.keys.append(fresh)
        self.published = [fresh]
        return fresh

    def claims(self, **overrides: Any) -> dict[str, Any]:
        now = int(time.time())
        base = {
            "iss": self.url,
            "sub": "user-1",
            "aud": RESOURCE,
            "exp": now + 600,
            "iat": now,
            "client_id": "app",
        }
        base.update(overrides)
        return {k: v for k, v in base.items() if v is not DROP}

    def token(self, key: Key | None = None, headers: dict[str, Any] | None = None, **claims: Any):
        key = key or self.published[0]
        return jwt.encode(
            self.claims(**claims),
            key.private,
            algorithm=key.alg,
            headers={"kid": key.kid, **(headers or {})},
        )


#: A claim value meaning "leave this claim out".
DROP = object()


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _segments(header: dict[str, Any], claims: dict[str, Any]) -> str:
    return _b64(json.dumps(header).encode()) + "." + _b64(json.dumps(claims).encode())


def unsigned(claims: dict[str, Any], kid: str) -> str:
    """`alg: none` with an empty signature."""
    return _segments({"alg": "none", "typ": "JWT", "kid": kid}, claims) + "."


def hs256_with_public_key(claims: dict[str, Any], key: Key) -> str:
    """The algorithm-confusion attack: HMAC keyed with the issuer's public key PEM."""
    signing_input = _segments({"alg": "HS256", "typ": "JWT", "kid": key.kid}, claims)
    mac = hmac.new(key.public_pem(), signing_input.encode(), hashlib.sha256).digest()
    return signing_input + "." + _b64(mac)


def tamper(token: str, **changes: Any) -> str:
    """`token` with its payload changed and its original signature kept."""
    header, payload, signature = token.split(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    claims.update(changes)
    return header + "." + _b64(json.dumps(claims).encode()) + "." + signature


def reheader(token: str, **changes: Any) -> str:
    """`token` with its header changed and its original signature kept."""
    header, payload, signature = token.split(".")
    fields = json.loads(base64.urlsafe_b64decode(header + "=" * (-len(header) % 4)))
    fields.update(changes)
    return _b64(json.dumps(fields).encode()) + "." + payload + "." + signature
