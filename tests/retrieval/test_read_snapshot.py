"""A recall, and a listing page, read one snapshot (issue 18): a write committed between two of
their statements is seen by the whole answer or not at all, on every backend.

The write is injected through the store's tracer hook (`CPERSONA_SQL_TRACE`): when the recall's
thread starts its k-th statement, another engine on the same database stores a memory that
every arm finds (the vector scan, both full-text arms, the keyword arm, the pool count), and the
recall goes on once it is committed. The answer must equal the answer of the same recall just
before the write or just after it. Without one snapshot the arms that ran before the write miss
the new memory and the later ones find it: a third answer. The view's listing page counts the
agent's rows and then reads them: a write between the two must not show a row the count lacks.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import cpersona.engine as engine_module
import pytest
from cpersona.engine import Engine
from cpersona.retrieval.pipeline import Recaller
from cpersona.storage.pg.db import OPENER_THREAD

pytestmark = pytest.mark.anyio

QUERY = "lighthouse keeper harbour lamp"
CORPUS = [
    "the lighthouse keeper trimmed the lamp at dusk",
    "fog over the harbour kept the ferries in port",
    "a keeper's log of every ship that passed the lamp",
    "the harbour master closed the lighthouse road",
]
#: What the injected writes store: a close match for every arm.
INJECTED = "lighthouse keeper harbour lamp, written in the middle of a recall ({})"
_CONTROL = ("BEGIN", "COMMIT", "END", "ROLLBACK", "SAVEPOINT", "RELEASE", "--")


class Injector:
    """The tracer: counts the statements of the thread that runs `Recaller.recall` and, at the
    `at`-th, runs `write` on another thread and waits until it has committed."""

    def __init__(self) -> None:
        self.recall_thread: int | None = None
        self.at = 0
        self.count = 0
        self.write: Callable[[], None] | None = None
        self.injected = False

    def trace(self, sql: str, params: object) -> None:
        # PostgreSQL sends a snapshot's BEGIN (and its reads) from an opener thread for the
        # recall: they are the recall's statements too (one recall runs at a time here).
        opener = threading.current_thread().name.startswith(OPENER_THREAD)
        if self.recall_thread is None or (
            threading.get_ident() != self.recall_thread and not opener
        ):
            return
        if sql.lstrip().upper().startswith(_CONTROL):
            return
        self.count += 1
        if self.count == self.at and self.write is not None and not self.injected:
            done = threading.Event()

            def run() -> None:
                assert self.write is not None
                self.write()
                done.set()

            writer = threading.Thread(target=run, name="injected-write")
            writer.start()
            writer.join(30)
            assert done.is_set(), "the injected write did not commit within 30 s"
            self.injected = True

    def arm(self, at: int, write: Callable[[], None] | None) -> None:
        self.at, self.count, self.write, self.injected = at, 0, write, False


@pytest.fixture
def injector(monkeypatch: pytest.MonkeyPatch) -> Injector:
    inj = Injector()
    # Engines made with sql_trace=True install this tracer on every connection they open.
    monkeypatch.setattr(engine_module, "_sql_tracer", inj.trace)
    monkeypatch.setattr(engine_module, "_redacted_sql_tracer", inj.trace)
    recall = Recaller.recall

    def traced(self: Recaller, req: Any) -> Any:
        inj.recall_thread = threading.get_ident()
        try:
            return recall(self, req)
        finally:
            inj.recall_thread = None

    monkeypatch.setattr(Recaller, "recall", traced)
    return inj


async def test_a_write_between_two_statements_of_a_recall_is_seen_whole_or_not_at_all(
    kernel: str,
    store_backend: str,
    connect: Callable[..., Any],
    make_engine: Callable[..., Engine],
    injector: Injector,
) -> None:
    # No recall-count bookkeeping: the answers before and after are then comparable as wholes.
    async with connect(sql_trace=True, confidence_enabled=False) as tools:
        await tools.store_all(CORPUS)
        await tools.episode("the lighthouse keeper's harbour lamp was relit after the storm")
        other = make_engine(sql_trace=True, confidence_enabled=False)
        await tools.recall(QUERY)  # the indexes are current, the caches warm
        injector.arm(0, None)
        await tools.recall(QUERY)
        statements = injector.count
        assert statements >= 4, statements
        mixed = []
        for at in range(2, statements + 1):
            before = await tools.messages(QUERY)

            stored: list[int] = []

            def write(n: int = at, ids: list[int] = stored) -> None:
                out = other.writer.store("alice", {"content": INJECTED.format(n)}, "", "")
                assert out["result"] == "stored", out
                ids.append(int(out["id"]))

            injector.arm(at, write)
            during = await tools.messages(QUERY)
            assert injector.injected, f"statement {at} of {statements} never ran"
            injector.arm(0, None)
            after = await tools.messages(QUERY)
            assert INJECTED.format(at) in [m["content"] for m in after]
            if during not in (before, after):
                mixed.append((at, [m["content"] for m in during]))
            # Back to the corpus alone, so each position is tested on the same database.
            deleted = await tools("delete_memory", {"agent_id": "alice", "memory_id": stored[0]})
            assert deleted["ok"] is True, deleted
        assert mixed == []


async def _get(app: Any, path: str) -> str:
    """One GET through the view's ASGI app in this process (the injection needs the process)."""
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"127.0.0.1")],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 80),
    }
    await app(scope, receive, send)
    (start,) = [m for m in sent if m["type"] == "http.response.start"]
    assert start["status"] == 200, start
    return b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body").decode()


async def test_a_write_between_the_count_and_the_rows_of_a_listing_page_is_not_half_seen(
    kernel: str,
    store_backend: str,
    connect: Callable[..., Any],
    make_engine: Callable[..., Engine],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import cpersona.storage.browse as browse
    from cpersona.web.app import Access, build_web_app

    async with connect() as tools:
        await tools.store_all(CORPUS)
        other = make_engine()
        app = build_web_app(tools.engine, Access(token=None, acl=None))
        counts = browse.agents
        writes: list[int] = []

        def counted_then_written(db: Any) -> Any:
            found = counts(db)  # the page's first statement: the agent's row counts
            done = threading.Event()

            def write() -> None:
                out = other.writer.store("alice", {"content": INJECTED.format("listing")}, "", "")
                writes.append(int(out["id"]))
                done.set()

            writer = threading.Thread(target=write, name="injected-write")
            writer.start()
            writer.join(30)
            assert done.is_set(), "the injected write did not commit within 30 s"
            return found

        monkeypatch.setattr(browse, "agents", counted_then_written)
        page = await _get(app, "/agents/alice")
        monkeypatch.setattr(browse, "agents", counts)
        assert writes, "the listing never counted"
        after = await _get(app, "/agents/alice")
    # The page says how many rows the agent has and shows them (one page: fewer than 50).
    assert f"{len(CORPUS)} in all" in page
    assert page.count('class="meta">mem:') == len(CORPUS)
    assert f"{len(CORPUS) + 1} in all" in after
    assert after.count('class="meta">mem:') == len(CORPUS) + 1
