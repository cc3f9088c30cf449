"""The read-only web view (`cpersona web`): agents, their memories, episodes and profile, a
search box that runs the real recall pipeline, and the health verdict.

Server-rendered (Jinja2, autoescaped) from templates and one stylesheet shipped in the wheel: no
JavaScript, no build step, no CDN, so it works offline. Every route answers GET (and HEAD) only;
any other method on any path is 405 before anything else runs, so no request can change data.
Searching skips recall-count bookkeeping (as a paused session does) and health runs report-only.

Access: with neither `CPERSONA_AUTH_TOKEN` nor `CPERSONA_ACL_FILE` the view is open and may only
listen on loopback (`cpersona web` refuses other addresses). With either, every request must
carry the token: `Authorization: Bearer <token>`, or once in the URL (`/?token=<token>`), which
sets an HttpOnly, SameSite=Strict cookie and redirects to the same page without it. In ACL mode
a client sees only the agents it may read.
"""

from __future__ import annotations

import hmac
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.applications import Starlette
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Receive, Scope, Send

from cpersona import __version__
from cpersona.health.context import from_engine
from cpersona.health.registry import NAMES, check_health
from cpersona.models import ProjectFilter
from cpersona.retrieval import messages as msgs
from cpersona.retrieval.pipeline import RecallRequest
from cpersona.server.acl import STAR, AclConfig
from cpersona.storage import browse
from cpersona.storage import episodes as episode_sql
from cpersona.storage import memories as memory_sql
from cpersona.storage import profiles as profile_sql

if TYPE_CHECKING:
    from cpersona.engine import Engine

HERE = Path(__file__).parent
PAGE_ROWS = 50
COOKIE = "cpersona_web_token"
READ_METHODS = frozenset({"GET", "HEAD"})
#: The Host names a loopback-bound view answers to (`build_web_app`'s `hosts`).
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]")
SEARCH_LIMIT_MAX = 100
#: No script, no frames, nothing from elsewhere: the page is text and one stylesheet.
SECURITY_HEADERS = {
    "content-security-policy": "default-src 'none'; style-src 'self'; img-src 'self'; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "cache-control": "no-store",
}


@dataclass(frozen=True)
class Access:
    """Who may look: nobody to check (`open`), one token, or the ACL file's clients."""

    token: str | None
    acl: AclConfig | None

    @property
    def open(self) -> bool:
        return self.token is None and self.acl is None

    def identify(self, presented: str) -> tuple[bool, str | None]:
        """(known, the ACL client id or None)."""
        raw = presented.encode("utf-8")
        if self.acl is not None:
            client = self.acl.identify(raw)
            return client is not None, client
        assert self.token is not None
        return hmac.compare_digest(raw, self.token.encode("utf-8")), None

    def may_read(self, client_id: str | None, agent: str) -> bool:
        if self.acl is None:
            return True
        client = self.acl.client(client_id or "")
        return client is not None and client.level(agent) >= 1


class ReadOnly:
    """405 for every method but GET and HEAD, on every path, before anything else runs."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] not in READ_METHODS:
            response = PlainTextResponse(
                "this view is read-only", status_code=405, headers={"allow": "GET, HEAD"}
            )
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)


class TokenGate:
    """401 unless the request carries the token (header, cookie, or `?token=` once)."""

    def __init__(self, app: ASGIApp, access: Access, pages: Pages) -> None:
        self.app = app
        self.access = access
        self.pages = pages

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self.access.open:
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        from_query = request.query_params.get("token")
        presented = _bearer(request) or from_query or request.cookies.get(COOKIE)
        known, client_id = self.access.identify(presented) if presented else (False, None)
        if not known:
            response = self.pages.render(
                "error.html",
                status=401,
                title="Token required",
                message="This view needs the server's token: open this page once as "
                "/?token=<token> (the value of CPERSONA_AUTH_TOKEN, or your ACL client's).",
            )
            response.headers["www-authenticate"] = "Bearer"
            await response(scope, receive, send)
            return
        if from_query is not None:
            # Keep the token out of the address bar, history and logs from here on.
            rest = [(k, v) for k, v in request.query_params.multi_items() if k != "token"]
            # One leading slash: `//host` or `/\host` would send the browser to another site.
            path = "/" + request.url.path.lstrip("/\\")
            target = path + (f"?{urlencode(rest)}" if rest else "")
            redirect = RedirectResponse(target, status_code=303)
            redirect.set_cookie(COOKIE, presented, httponly=True, samesite="strict", path="/")
            await redirect(scope, receive, send)
            return
        scope.setdefault("state", {})["client_id"] = client_id
        await self.app(scope, receive, send)


def _bearer(request: Request) -> str | None:
    scheme, _, rest = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer":
        return None
    return rest.strip() or None


class Pages:
    """The templates and what every page shows."""

    def __init__(self, engine: Engine) -> None:
        self.env = Environment(
            loader=FileSystemLoader(HERE / "templates"),
            autoescape=select_autoescape(["html"]),
            trim_blocks=True,
            lstrip_blocks=True,
        )
        self.common = {
            "root": "/",
            "lang": "en",
            "version": __version__,
            "database": Path(engine.settings.db_path).name,
        }

    def render(self, name: str, *, status: int = 200, **context: Any) -> HTMLResponse:
        html = self.env.get_template(name).render(**self.common, **context)
        return HTMLResponse(html, status_code=status, headers=SECURITY_HEADERS)


def build_web_app(engine: Engine, access: Access, *, hosts: Sequence[str] | None = None) -> ASGIApp:
    """The view's ASGI app. `hosts`: the only Host header names answered (400 otherwise);
    None answers any. A loopback-bound view passes LOOPBACK_HOSTS: a page on another site
    whose name an attacker re-points at 127.0.0.1 (DNS rebinding) is then refused instead of
    reading an open view's memories as same-origin."""
    pages = Pages(engine)
    db = engine.db

    def client_of(request: Request) -> str | None:
        return request.scope.get("state", {}).get("client_id")

    def visible_agents(request: Request) -> list[browse.AgentCounts]:
        client = client_of(request)
        return [a for a in browse.agents(db) if access.may_read(client, a.agent_id)]

    def counts_of(agent: str) -> browse.AgentCounts:
        found = next((a for a in browse.agents(db) if a.agent_id == agent), None)
        return found or browse.AgentCounts(agent, 0, 0, 0)

    def refused(request: Request, agent: str) -> Response | None:
        if access.may_read(client_of(request), agent):
            return None
        return pages.render(
            "error.html",
            status=403,
            title="Not yours to read",
            message=f"This token may not read agent {agent!r}.",
        )

    def page_number(request: Request, total: int) -> tuple[int, int]:
        pages_total = max(1, math.ceil(total / PAGE_ROWS))
        try:
            page = int(request.query_params.get("page", "1"))
        except ValueError:
            page = 1
        return min(max(page, 1), pages_total), pages_total

    def overview(request: Request) -> Response:
        agents = visible_agents(request)
        return pages.render(
            "overview.html",
            agents=agents,
            restricted=access.acl is not None,
            selected=agents[0].agent_id if agents else "",
            query="",
            limit=10,
        )

    def listing(request: Request, tab: str) -> Response:
        """One page (newest first) of an agent's memories or episodes."""
        agent = request.path_params["agent"]
        denied = refused(request, agent)
        if denied is not None:
            return denied
        # The total and the page from one snapshot: a write between them would page a
        # count the rows do not have.
        with db.snapshot():
            counts = counts_of(agent)
            total = counts.memories if tab == "memories" else counts.episodes
            page, pages_total = page_number(request, total)
            newest = memory_sql.list_newest if tab == "memories" else episode_sql.list_newest
            rows = newest(db, agent, ProjectFilter(None), PAGE_ROWS, (page - 1) * PAGE_ROWS)
        return pages.render(
            f"{tab}.html",
            agent=agent,
            tab=tab,
            rows=rows,
            page=page,
            pages=pages_total,
            total=total,
        )

    def memories(request: Request) -> Response:
        return listing(request, "memories")

    def episodes(request: Request) -> Response:
        return listing(request, "episodes")

    def profile(request: Request) -> Response:
        agent = request.path_params["agent"]
        denied = refused(request, agent)
        if denied is not None:
            return denied
        text = profile_sql.get(db, agent)
        return pages.render("profile.html", agent=agent, tab="profile", profile=text)

    def search(request: Request) -> Response:
        agents = visible_agents(request)
        agent = request.query_params.get("agent", agents[0].agent_id if agents else "")
        query = request.query_params.get("q", "")
        try:
            limit = min(max(int(request.query_params.get("limit", "10")), 1), SEARCH_LIMIT_MAX)
        except ValueError:
            limit = 10
        context: dict[str, Any] = {
            "agents": agents,
            "selected": agent,
            "query": query,
            "limit": limit,
            "results": [],
            "advisory": None,
        }
        if query.strip():
            denied = refused(request, agent)
            if denied is not None:
                return denied
            # paused=True: a look from this page is not a recall an agent made.
            req = RecallRequest(agent_id=agent, query=query, limit=limit, paused=True)
            result = engine.recaller.recall(req)
            context["results"] = [msgs.message(r) for r in result.rows]
            if result.advisory:
                # The advisory's own words for people (its `runbook` addresses an agent).
                reason, evidence = result.advisory["reason"], result.advisory.get("evidence")
                context["advisory"] = f"Recall is degraded: {reason}" + (
                    f" ({evidence})" if evidence else ""
                )
        return pages.render("search.html", **context)

    def health(request: Request) -> Response:
        if not access.may_read(client_of(request), STAR):
            return pages.render(
                "error.html",
                status=403,
                title="Not yours to read",
                message="The health report covers every agent; this token may not read all.",
            )
        report = check_health(from_engine(engine, ""), fix=False)
        return pages.render(
            "health.html",
            verdict=report.get("status", "unknown"),
            issues=report.get("issues", []),
            total=report.get("total_memories", 0),
            checks=len(NAMES),
        )

    app = Starlette(
        routes=[
            Route("/", overview, methods=["GET"]),
            Route("/agents/{agent:path}/episodes", episodes, methods=["GET"]),
            Route("/agents/{agent:path}/profile", profile, methods=["GET"]),
            Route("/agents/{agent:path}", memories, methods=["GET"]),
            Route("/search", search, methods=["GET"]),
            Route("/health", health, methods=["GET"]),
            Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
        ]
    )
    gated = ReadOnly(TokenGate(app, access, pages))
    if hosts is None:
        return gated
    return TrustedHostMiddleware(gated, allowed_hosts=list(hosts))
