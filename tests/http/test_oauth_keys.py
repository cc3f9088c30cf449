"""The issuer key cache of the OAuth verifier, on a controlled clock (surface.md §11.5).

The verifier runs in-process against a real test issuer on loopback; only time is simulated,
so the one-hour cache and the 60-second refetch floor are observed without waiting: a key set is
fetched once and reused, a key rotated in at the issuer is picked up once the floor has passed
(and the key rotated out is refused from then on), tokens naming unknown key ids cannot make the
server fetch more than once a minute, and an unreachable issuer leaves the last good set in use.
"""

from __future__ import annotations

import pytest
from cpersona.server.acl import AclClient, AclConfig
from cpersona.server.oauth import OAuthConfig
from cpersona.server.oauth_tokens import JWKS_REFETCH_FLOOR, JWKS_TTL, Verifier
from oauth_support import RESOURCE, Key, TestIssuer


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def issuer():
    issuer = TestIssuer(algs=("RS256",))
    yield issuer
    issuer.close()


def verifier(issuer: TestIssuer, clock: Clock, jwks_uri: str | None = None) -> Verifier:
    acl = AclConfig(
        "acl.json",
        (AclClient(f"oauth:{issuer.url}:app", None, {"*": "read"}),),
    )
    config = OAuthConfig(RESOURCE, (issuer.url,), (), jwks_uri, verify=True)
    return Verifier(config, acl, clock=clock)


def accepted(v: Verifier, token: str) -> bool:
    identity = v.check(token.encode())
    return identity is not None


def fetched_once(issuer: TestIssuer, clock: Clock) -> tuple[Verifier, Key]:
    """A verifier that has fetched the issuer's keys once, by accepting a token signed with
    the first published key (returned with it)."""
    v = verifier(issuer, clock)
    key = issuer.published[0]
    assert accepted(v, issuer.token(key))
    return v, key


def test_oauth_keys_are_fetched_once_and_cached(issuer):
    clock = Clock()
    v = verifier(issuer, clock)
    identity = v.check(issuer.token(sub="alice").encode())
    assert identity is not None
    assert identity.client_id == f"oauth:{issuer.url}:app"
    assert (identity.subject.issuer, identity.subject.subject) == (issuer.url, "alice")
    for step in range(5):
        clock.now += 600
        assert accepted(v, issuer.token(sub=f"user-{step}"))
    assert issuer.fetches == 1  # 3000 s later: still the first fetch


def test_oauth_key_rotation_is_picked_up_after_the_floor(issuer):
    clock = Clock()
    v, old = fetched_once(issuer, clock)
    new = issuer.rotate()
    clock.now += JWKS_REFETCH_FLOOR / 2
    assert not accepted(v, issuer.token(new))  # within the floor: no refetch yet
    assert issuer.fetches == 1
    clock.now += JWKS_REFETCH_FLOOR
    assert accepted(v, issuer.token(new))
    assert issuer.fetches == 2
    assert not accepted(v, issuer.token(old))  # rotated out at the issuer
    assert issuer.fetches == 2


def test_oauth_unknown_key_ids_fetch_at_most_once_per_floor(issuer):
    clock = Clock()
    v, key = fetched_once(issuer, clock)
    for i in range(50):
        clock.now += 1
        forged = issuer.token(key, headers={"kid": f"made-up-{i}"})
        assert not accepted(v, forged)
    # 50 seconds of made-up key ids after the first fetch: no second fetch
    assert issuer.fetches == 1
    clock.now += JWKS_REFETCH_FLOOR
    assert not accepted(v, issuer.token(key, headers={"kid": "made-up-late"}))
    assert issuer.fetches == 2


def test_oauth_keys_expire_after_an_hour(issuer):
    clock = Clock()
    v, old = fetched_once(issuer, clock)
    issuer.rotate()
    clock.now += JWKS_TTL - 1
    assert accepted(v, issuer.token(old))  # still the cached set
    clock.now += 2
    assert not accepted(v, issuer.token(old))  # refetched: the key is gone
    assert issuer.fetches == 2


def test_oauth_unreachable_issuer_keeps_the_last_good_set(issuer):
    clock = Clock()
    v, key = fetched_once(issuer, clock)
    issuer.discovery = "down"  # its metadata now answers 404
    clock.now += JWKS_TTL + 1
    assert accepted(v, issuer.token(key))
    assert issuer.fetches == 1


def test_oauth_jwks_override_replaces_discovery(issuer):
    clock = Clock()
    published = issuer.published[0]
    other = TestIssuer(algs=("ES256",))
    try:
        override = issuer.serve_keys("/override-jwks", [other.keys[0]])
        v = verifier(issuer, clock, jwks_uri=override)
        assert not accepted(v, issuer.token(published))  # the discovered set is not used
        assert accepted(v, issuer.token(other.keys[0]))
        assert issuer.fetches == 0
    finally:
        other.close()


def test_oauth_issuer_metadata_naming_another_issuer_is_not_trusted(issuer):
    real = issuer.url
    v = verifier(issuer, Clock())
    token = issuer.token()
    issuer.url = "https://elsewhere.example.test"  # its metadata now names another issuer
    assert v.check(token.encode()) is None
    assert issuer.fetches == 0  # the JWKS it points to was never fetched
    issuer.url = real


def test_oauth_refusal_is_one_log_line_even_when_the_issuer_is_down(issuer, caplog):
    import logging

    issuer.discovery = "down"
    v = verifier(issuer, Clock())
    token = issuer.token()
    with caplog.at_level(logging.WARNING, logger="cpersona.oauth"):
        assert not accepted(v, token)
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1, lines
    assert lines[0].startswith("OAuth token refused (401): ")
    assert "fetching the key set" in lines[0] and "404" in lines[0]
    assert token not in lines[0]


@pytest.mark.parametrize(
    ("resource", "url"),
    [
        ("https://m.example", "https://m.example/.well-known/oauth-protected-resource"),
        ("https://m.example/", "https://m.example/.well-known/oauth-protected-resource"),
        (
            "https://m.example:8443/a/mcp",
            "https://m.example:8443/.well-known/oauth-protected-resource/a/mcp",
        ),
    ],
)
def test_oauth_metadata_url_inserts_the_well_known_path_after_the_host(resource, url):
    """RFC 9728 §3.1: the well-known segment goes between the host and the resource's path."""
    config = OAuthConfig(resource, ("https://as.example",), ("a", "b"), None, verify=True)
    assert config.metadata_url == url
    assert config.challenge().decode() == f'Bearer resource_metadata="{url}", scope="a b"'
    assert config.document()["resource"] == resource  # verbatim, trailing slash and all
