"""The read-only web view over HTTP, as a browser's requests see it (the rendered page is tested
in a real browser in test_web_browser.py): the agents and their counts, paging newest first,
the real recall pipeline behind the search box without recall bookkeeping, escaping, the health
verdict; 405 for every method but GET/HEAD on every route with nothing changed; the token by
header, by `?token=` (then a cookie) or refused; ACL clients see only what they may read; an
open view refuses to listen beyond loopback."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest
from child_env import inherited
from support.http_server import WAIT
from web_support import NOTES, WebServer, fill, fingerprint

TOKEN = "web-token-9d2f"
ROUTES = [
    "/",
    "/agents/alice",
    "/agents/alice/episodes",
    "/agents/alice/profile",
    "/search?agent=alice&q=report",
    "/health",
    "/static/style.css",
    "/no/such/page",
]


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("web") / "mem.db"
    fill(path)
    return path


@pytest.fixture(scope="module")
def open_view(db: Path) -> Iterator[str]:
    server = WebServer(db)
    url = server.start()
    yield url
    server.stop()


def get(url: str, **kwargs: object) -> httpx2.Response:
    return httpx2.get(url, timeout=WAIT, follow_redirects=False, **kwargs)  # type: ignore[arg-type]


def test_overview_lists_agents_with_their_counts(open_view: str):
    page = get(open_view)
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html; charset=utf-8")
    text = page.text
    assert '<a href="/agents/alice">alice</a>' in text
    assert f'<td class="num">{NOTES + 2}</td>' in text  # alice's memories
    assert '<a href="/agents/bob">bob</a>' in text
    assert "default-src 'none'" in page.headers["content-security-policy"]


def test_memories_are_paged_newest_first_and_escaped(open_view: str):
    first = get(open_view + "agents/alice").text
    assert "page 1 of 3 · 122 in all" in first
    assert first.index("会議は火曜日") < first.index("note 119:")  # newest first
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in first
    assert "<script>" not in first
    last = get(open_view + "agents/alice?page=3").text
    assert "page 3 of 3" in last
    assert "note 0:" in last and "note 119:" not in last
    assert last.count('<p class="content">') == 22
    assert "page 3 of 3" in get(open_view + "agents/alice?page=99").text  # clamped


def test_episodes_profile_and_health(open_view: str):
    assert "planning the release" in get(open_view + "agents/alice/episodes").text
    assert "日本語も話す。" in get(open_view + "agents/alice/profile").text
    health = get(open_view + "health").text
    assert '<span class="verdict healthy">healthy</span>' in health


def test_search_runs_recall_without_bookkeeping(open_view: str, db: Path):
    before = fingerprint(db)
    page = get(open_view + "search", params={"agent": "alice", "q": "会議", "limit": "5"})
    assert page.status_code == 200
    results = page.text.split('<ol class="rows results">')[1]
    assert results.index("会議は火曜日の午後三時に変更されました") < results.index("Profile")
    assert "<dt>signal</dt>" in results
    assert fingerprint(db) == before  # no recall_count or last_recalled_at moved


def test_search_says_when_recall_is_degraded(db: Path):
    server = WebServer(db, {"CPERSONA_EMBEDDING_MODE": "none"})
    url = server.start()
    try:
        page = get(url + "search", params={"agent": "alice", "q": "quarterly report"})
    finally:
        server.stop()
    assert page.status_code == 200
    assert "the quarterly report is due" in page.text  # full-text still finds them
    warning = page.text.split('<p class="warn">')[1].split("</p>")[0]
    assert warning.startswith("Recall is degraded: embeddings are disabled")


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH"])
def test_no_route_accepts_a_write_method(open_view: str, db: Path, method: str):
    before = fingerprint(db)
    for route in ROUTES:
        answer = httpx2.request(method, open_view + route.lstrip("/"), timeout=WAIT)
        assert answer.status_code == 405, (method, route)
        assert answer.headers["allow"] == "GET, HEAD"
    assert fingerprint(db) == before


def test_the_token_by_header_query_or_cookie_or_refused(db: Path):
    server = WebServer(db, {"CPERSONA_AUTH_TOKEN": TOKEN})
    url = server.start()
    try:
        assert "?token=<your token>" in server.stderr
        refused = get(url)
        assert refused.status_code == 401
        assert refused.headers["www-authenticate"] == "Bearer"
        assert "alice" not in refused.text
        assert get(url, headers={"authorization": "Bearer wrong"}).status_code == 401
        assert get(url + "agents/alice?token=wrong").status_code == 401
        assert get(url, headers={"authorization": f"Bearer {TOKEN}"}).status_code == 200
        opened = get(url + f"agents/alice?page=2&token={TOKEN}")
        assert opened.status_code == 303
        assert opened.headers["location"] == "/agents/alice?page=2"
        cookie = opened.headers["set-cookie"]
        assert "HttpOnly" in cookie and "SameSite=strict" in cookie
        with httpx2.Client(base_url=url, timeout=WAIT) as browser:
            browser.cookies.set("cpersona_web_token", TOKEN)
            assert "page 2 of 3" in browser.get("/agents/alice?page=2").text
    finally:
        server.stop()


def test_a_loopback_view_answers_only_to_loopback_host_names(open_view: str):
    # DNS rebinding: a page on evil.example re-pointed at 127.0.0.1 would read as same-origin.
    port = open_view.rsplit(":", 1)[1].rstrip("/")
    rebound = get(open_view + "agents/alice", headers={"host": f"evil.example:{port}"})
    assert rebound.status_code == 400
    assert "quarterly report" not in rebound.text
    assert get(open_view, headers={"host": f"localhost:{port}"}).status_code == 200
    assert get(open_view, headers={"host": f"127.0.0.1:{port}"}).status_code == 200


def test_the_token_redirect_stays_on_this_site(db: Path):
    server = WebServer(db, {"CPERSONA_AUTH_TOKEN": TOKEN})
    url = server.start()
    try:
        for path in ("/evil.example/x", "//evil.example/x", "/\\evil.example/x"):
            opened = get(url + path + f"?token={TOKEN}")  # url ends in "/": "//evil..."
            assert opened.status_code == 303
            location = opened.headers["location"]
            # A browser reads `//host` and `/\host` as another site; `/%5Chost` is a path here.
            assert location.startswith("/") and location[1] not in "/\\", location
            assert location.endswith("evil.example/x"), location
    finally:
        server.stop()


def test_an_acl_client_sees_only_the_agents_it_may_read(db: Path, tmp_path: Path):
    acl = tmp_path / "acl.json"
    acl.write_text(
        json.dumps(
            {
                "clients": [
                    {"client_id": "viewer", "token": "viewer-tok", "grants": {"alice": "read"}},
                    {"client_id": "admin", "token": "admin-tok", "grants": {"*": "read"}},
                ]
            }
        ),
        encoding="utf-8",
    )
    acl.chmod(0o600)
    server = WebServer(db, {"CPERSONA_ACL_FILE": str(acl)})
    url = server.start()
    try:
        viewer = {"authorization": "Bearer viewer-tok"}
        overview = get(url, headers=viewer).text
        assert "/agents/alice" in overview and "/agents/bob" not in overview
        assert get(url + "agents/bob", headers=viewer).status_code == 403
        hidden = get(url + "search", params={"agent": "bob", "q": "東京"}, headers=viewer)
        assert hidden.status_code == 403 and "晴れ" not in hidden.text
        assert get(url + "health", headers=viewer).status_code == 403
        admin = {"authorization": "Bearer admin-tok"}
        assert "東京の天気は晴れです" in get(url + "agents/bob", headers=admin).text
        assert get(url + "health", headers=admin).status_code == 200
    finally:
        server.stop()


def test_an_open_view_refuses_to_listen_beyond_loopback(db: Path):
    env = inherited()
    env.update({"CPERSONA_DB_PATH": str(db), "CPERSONA_EMBEDDING_MODE": "hashing"})
    out = subprocess.run(
        [sys.executable, "-m", "cpersona", "web", "--host", "0.0.0.0", "--port", "0"],
        capture_output=True,
        text=True,
        env=env,
        timeout=WAIT,
    )
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [
        "cpersona: refusing to serve the web view on 0.0.0.0 without authentication: set "
        "CPERSONA_AUTH_TOKEN (or CPERSONA_ACL_FILE), bind 127.0.0.1, or set "
        "CPERSONA_ALLOW_UNAUTHENTICATED_HTTP=true to show every memory to anyone who can reach "
        "the port"
    ]


@pytest.mark.parametrize("port", ["70000", "-1", "http"])
def test_a_port_outside_the_tcp_range_is_a_usage_error(db: Path, port: str):
    env = inherited()
    env.update({"CPERSONA_DB_PATH": str(db), "CPERSONA_EMBEDDING_MODE": "hashing"})
    out = subprocess.run(
        [sys.executable, "-m", "cpersona", "web", "--port", port],
        capture_output=True,
        text=True,
        env=env,
        timeout=WAIT,
    )
    assert out.returncode == 2
    assert "is not a port (0 to 65535)" in out.stderr
