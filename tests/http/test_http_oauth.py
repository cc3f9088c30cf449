"""The OAuth resource server through a real server process (surface.md §11.5).

Two test issuers on loopback (one found by OpenID Connect discovery, one by RFC 8414 metadata)
sign tokens with RSA and EC keys made by the test. Valid tokens of listed clients drive the
official MCP client; each single defect of a token is refused with the same plain 401 as no
token at all, and one log line; an OAuth principal's grants act exactly like a static token's.
The metadata document is served unauthenticated with the configured strings verbatim.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from oauth_support import (
    DROP,
    RESOURCE,
    TestIssuer,
    hs256_with_public_key,
    reheader,
    tamper,
    unsigned,
)
from support.http_server import HttpServer, connect, initialize_body, post

ADMIN = "tok-admin"
STATIC_ALPHA = "tok-static-alpha"
SCOPES = 'memory.read, memory.write  bad"scope'
METADATA_PATH = "/.well-known/oauth-protected-resource/mcp"
CHALLENGE = (
    'Bearer resource_metadata="https://memory.example.test/.well-known/'
    'oauth-protected-resource/mcp", scope="memory.read memory.write"'
)


@pytest.fixture(scope="module")
def issuers():
    a = TestIssuer(algs=("RS256", "ES256", "ES384"), discovery="oidc")
    b = TestIssuer(algs=("PS256",), discovery="rfc8414")
    rotating = TestIssuer(algs=("RS256",))
    unlisted = TestIssuer(algs=("RS256",))
    yield {"a": a, "b": b, "rotating": rotating, "unlisted": unlisted}
    for issuer in (a, b, rotating, unlisted):
        issuer.close()


def oauth_id(issuer: TestIssuer, client: str) -> str:
    return f"oauth:{issuer.url}:{client}"


def write_acl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text(json.dumps({"clients": rows}), encoding="utf-8")
    path.chmod(0o600)
    return path


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, issuers):
    work = tmp_path_factory.mktemp("oauth")
    a, b, rot = issuers["a"], issuers["b"], issuers["rotating"]
    acl = write_acl(work / "acl.json", [
        {"client_id": "admin", "token": ADMIN, "grants": {"*": "read-write"}},
        {"client_id": "static-alpha", "token": STATIC_ALPHA, "grants": {"alpha": "read"}},
        {"client_id": oauth_id(a, "app-alpha"), "token": None, "grants": {"alpha": "read"}},
        {"client_id": oauth_id(a, "app"), "token": None, "grants": {"*": "read-write"}},
        {"client_id": oauth_id(b, "app"), "token": None, "grants": {"*": "read-write"}},
        {"client_id": oauth_id(rot, "app"), "token": None, "grants": {"*": "read-write"}},
    ])  # fmt: skip
    srv = HttpServer(work, {
        "CPERSONA_ACL_FILE": str(acl),
        "CPERSONA_OAUTH_RESOURCE": RESOURCE,
        "CPERSONA_OAUTH_AUTHORIZATION_SERVERS": f"{a.url}, {b.url}\n{rot.url}",
        "CPERSONA_OAUTH_SCOPES": SCOPES,
    })  # fmt: skip
    srv.start()
    yield srv
    assert srv.stop() == 0, srv.stderr


def metadata_url(server: HttpServer, path: str = METADATA_PATH) -> str:
    return server.url.removesuffix("/mcp") + path


def refusals(server: HttpServer) -> int:
    return server.stderr.count("OAuth token refused (401)")


# --------------------------------------------------------------------------- discovery


def test_http_oauth_metadata_is_served_without_authentication(server, issuers):
    import httpx2

    got = httpx2.get(metadata_url(server), timeout=30)
    assert got.status_code == 200 and got.headers["content-type"] == "application/json"
    assert got.json() == {
        "resource": RESOURCE,
        "authorization_servers": [
            issuers["a"].url, issuers["b"].url, issuers["rotating"].url
        ],
        "bearer_methods_supported": ["header"],
        "scopes_supported": ["memory.read", "memory.write"],
    }  # fmt: skip
    head = httpx2.head(metadata_url(server), timeout=30)
    assert head.status_code == 200 and head.content == b""
    assert httpx2.post(metadata_url(server), timeout=30).status_code == 405
    # only the exact path is public: a neighbour is the MCP endpoint, behind authentication
    for other in (METADATA_PATH + "/x", "/.well-known/oauth-protected-resource"):
        assert httpx2.get(metadata_url(server, other), timeout=30).status_code == 401


def test_http_oauth_401_names_the_metadata_and_scopes(server):
    refused = post(server.url, initialize_body())
    assert refused.status_code == 401
    assert refused.json() == {"error": "unauthorized"}
    assert refused.headers["www-authenticate"] == CHALLENGE


# --------------------------------------------------------------------------- valid tokens


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("issuer_name", "alg"),
    [("a", "RS256"), ("a", "ES256"), ("a", "ES384"), ("b", "PS256")],
)
async def test_http_oauth_valid_tokens_of_listed_clients_pass(server, issuers, issuer_name, alg):
    issuer = issuers[issuer_name]
    key = next(k for k in issuer.keys if k.alg == alg)
    token = issuer.token(key)
    async with connect(server.url, token) as tools:
        stored = await tools("store", {"agent_id": "beta", "message": {"content": f"by {alg}"}})
        assert stored["result"] == "stored", stored
        listed = await tools("list_memories", {"agent_id": "beta"})
        assert any(m["content"] == f"by {alg}" for m in listed["memories"]), listed
    # azp names the client when client_id is absent (OpenID Connect style)
    by_azp = issuer.token(key, client_id=DROP, azp="app")
    assert post(server.url, initialize_body(), auth(by_azp)).status_code == 200


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


# --------------------------------------------------------------------------- defects


def defects(issuers: dict[str, TestIssuer]) -> dict[str, str]:
    """One token per single defect; everything else about each one is valid."""
    a, b, unlisted = issuers["a"], issuers["b"], issuers["unlisted"]
    rsa = next(k for k in a.keys if k.alg == "RS256")
    now = a.claims()["iat"]
    return {
        "wrong issuer": unlisted.token(),
        "issuer claimed, another issuer's key": a.token(b.keys[0], iss=a.url),
        "wrong audience": a.token(rsa, aud="https://other.example.test/mcp"),
        "audience missing": a.token(rsa, aud=DROP),
        "expired": a.token(rsa, exp=now - 600, iat=now - 1200),
        "exp missing": a.token(rsa, exp=DROP),
        "not yet valid": a.token(rsa, nbf=now + 600),
        "sub missing": a.token(rsa, sub=DROP),
        "sub empty": a.token(rsa, sub=""),
        "client_id and azp missing": a.token(rsa, client_id=DROP),
        "client not in the ACL file": a.token(rsa, client_id="stranger"),
        "act present": a.token(rsa, act={"sub": "agent-7"}),
        "alg none": unsigned(a.claims(), rsa.kid),
        "HS256 keyed with the public key": hs256_with_public_key(a.claims(), rsa),
        "unknown kid": a.token(rsa, headers={"kid": "no-such-key"}),
        "tampered payload": tamper(a.token(rsa), sub="user-2", client_id="app"),
        "tampered client": tamper(a.token(rsa, client_id="app-alpha"), client_id="app"),
        "tampered issuer": tamper(a.token(rsa), iss=b.url),
        "ES256 token relabelled RS256": reheader(
            a.token(next(k for k in a.keys if k.alg == "ES256")), alg="RS256"
        ),
        "not a JWT": "definitely-not-a-jwt",
    }


def test_http_oauth_each_defect_is_a_plain_401(server, issuers):
    for label, token in defects(issuers).items():
        before = refusals(server)
        refused = post(server.url, initialize_body(), auth(token))
        assert refused.status_code == 401, label
        assert refused.json() == {"error": "unauthorized"}, label
        assert refused.headers["www-authenticate"] == CHALLENGE, label
        assert refusals(server) == before + 1, (label, server.stderr[-2000:])
    assert ADMIN not in server.stderr


def test_http_oauth_key_rotated_out_at_the_issuer_is_refused(server, issuers):
    rot = issuers["rotating"]
    old = rot.published[0]
    new = rot.rotate()
    assert post(server.url, initialize_body(), auth(rot.token(old))).status_code == 401
    assert post(server.url, initialize_body(), auth(rot.token(new))).status_code == 200


# --------------------------------------------------------------------------- grants


def grant_calls() -> list[tuple[str, dict[str, Any]]]:
    return [
        ("list_memories", {"agent_id": "alpha"}),
        ("recall", {"agent_id": "alpha", "query": "vault"}),
        ("get_profile", {"agent_id": "gamma"}),
        ("store", {"agent_id": "alpha", "message": {"content": "not allowed"}}),
        ("update_profile", {"agent_id": "beta", "profile": "no"}),
        ("list_memories", {"agent_id": ""}),
        ("delete_memory", {"memory_id": 10**9}),
        ("persistence_status", {}),
        ("pause_persistence", {}),
    ]


@pytest.mark.anyio
async def test_http_oauth_principal_grants_act_like_a_static_tokens(server, issuers):
    a = issuers["a"]
    principal = oauth_id(a, "app-alpha")
    async with connect(server.url, ADMIN) as admin:
        await admin("store", {"agent_id": "alpha", "message": {"content": "alpha vault note"}})
    answers: dict[str, list[Any]] = {}
    for who, token, client_id in (
        ("static", STATIC_ALPHA, "static-alpha"),
        ("oauth", a.token(next(k for k in a.keys if k.alg == "ES256"), client_id="app-alpha"),
         principal),
    ):  # fmt: skip
        async with connect(server.url, token) as tools:
            got = []
            for tool, args in grant_calls():
                text = json.dumps(await tools(tool, args))
                got.append(json.loads(text.replace(json.dumps(client_id)[1:-1], "<client>")))
            answers[who] = got
    assert answers["static"] == answers["oauth"]
    denied = [a for a in answers["oauth"] if a.get("error") == "permission_denied"]
    assert len(denied) == 6 and all(d["client_id"] == "<client>" for d in denied)
    assert any(m["content"] == "alpha vault note" for m in answers["oauth"][0]["memories"])


# --------------------------------------------------------------------------- configuration


@pytest.mark.parametrize(
    ("env", "says"),
    [
        ({"CPERSONA_OAUTH_RESOURCE": RESOURCE}, "CPERSONA_OAUTH_AUTHORIZATION_SERVERS is not set"),
        (
            {"CPERSONA_OAUTH_AUTHORIZATION_SERVERS": "https://as.example.test"},
            "CPERSONA_OAUTH_RESOURCE is not set",
        ),
        ({"CPERSONA_OAUTH_SCOPES": "memory.read"}, "CPERSONA_OAUTH_RESOURCE is not set"),
        (
            {
                "CPERSONA_OAUTH_RESOURCE": "memory server",
                "CPERSONA_OAUTH_AUTHORIZATION_SERVERS": "https://as.example.test",
            },
            "CPERSONA_OAUTH_RESOURCE: 'memory server' is not an http(s) URL",
        ),
        (
            {
                "CPERSONA_OAUTH_RESOURCE": RESOURCE,
                "CPERSONA_OAUTH_AUTHORIZATION_SERVERS": "https://a.example.test https://b.example.test",
                "CPERSONA_OAUTH_JWKS_URI": "https://a.example.test/jwks",
            },
            "needs exactly one issuer",
        ),
    ],
    ids=["resource-only", "servers-only", "scopes-only", "resource-not-url", "jwks-two-issuers"],
)
def test_http_oauth_incomplete_configuration_refuses_start(tmp_path, env, says):
    srv = HttpServer(tmp_path, {"CPERSONA_AUTH_TOKEN": "tok", **env})
    srv.launch()
    assert srv.wait_exit() == 2
    lines = srv.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("cpersona: ") and says in lines[0], lines
    assert not srv.db.exists()


def test_http_oauth_discovery_without_acl_publishes_but_accepts_no_jwt(tmp_path, issuers):
    a = issuers["a"]
    srv = HttpServer(tmp_path, {
        "CPERSONA_AUTH_TOKEN": "legacy-token",
        "CPERSONA_OAUTH_RESOURCE": RESOURCE,
        "CPERSONA_OAUTH_AUTHORIZATION_SERVERS": a.url,
    })  # fmt: skip
    srv.start()
    try:
        import httpx2

        assert httpx2.get(metadata_url(srv), timeout=30).status_code == 200
        jwt_call = post(srv.url, initialize_body(), auth(a.token()))
        assert jwt_call.status_code == 401
        assert jwt_call.headers["www-authenticate"] == (
            'Bearer resource_metadata="https://memory.example.test/.well-known/'
            'oauth-protected-resource/mcp"'
        )
        assert post(srv.url, initialize_body(), auth("legacy-token")).status_code == 200
        assert "no OAuth token is accepted" in srv.stderr
        assert "OAuth token refused" not in srv.stderr  # never verified, so never logged
    finally:
        assert srv.stop() == 0, srv.stderr
