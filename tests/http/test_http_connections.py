"""Slow, half-open and excess HTTP connections against a real server (issue 11.4).

Raw sockets on 127.0.0.1, a bounded number of them, every wait bounded by `WAIT`. The server runs
with timeouts of about a second, so a connection it never closes fails the test at `WAIT`
(uvicorn alone keeps such connections open forever); no assertion is about how fast anything is.
"""

from __future__ import annotations

import contextlib
import select
import socket
import time
from collections.abc import Iterator

import pytest
from support.http_server import WAIT, HttpServer, connect

TOKEN = "connections-test-token"


async def stores(url: str, content: str) -> None:
    """A fresh session's store is answered `stored`: the server still serves valid clients."""
    async with connect(url, TOKEN) as tools:
        out = await tools("store", {"agent_id": "a", "message": {"content": content}})
        assert out["result"] == "stored", out


@contextlib.contextmanager
def sockets() -> Iterator[list[socket.socket]]:
    opened: list[socket.socket] = []
    try:
        yield opened
    finally:
        for sock in opened:
            sock.close()


def stalled(port: int, opened: list[socket.socket], first_bytes: bytes) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=WAIT)
    opened.append(sock)
    if first_bytes:
        sock.sendall(first_bytes)
    return sock


def until_closed(sock: socket.socket, deadline: float) -> bytes | None:
    """What the server sent before closing `sock`, or None if it was still open at `deadline`."""
    received = b""
    while time.monotonic() < deadline:
        ready, _, _ = select.select([sock], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            break
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            return received
        if not chunk:
            return received
        received += chunk
    return None


def status(response: bytes | None) -> int | None:
    if not response:
        return None
    return int(response.split(b" ", 2)[1])


def post_head(port: int) -> bytes:
    """A POST's request line and headers, without the blank line that ends them."""
    return (
        f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {TOKEN}\r\n"
        "Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"
    ).encode()


def log_lines(server: HttpServer, needle: str) -> int:
    return sum(needle in line for line in server.stderr.splitlines())


@pytest.mark.anyio
async def test_stalled_connections_are_closed_and_valid_clients_served(tmp_path):
    server = HttpServer(
        tmp_path,
        {
            "CPERSONA_AUTH_TOKEN": TOKEN,
            "CPERSONA_HTTP_HEADER_TIMEOUT_SECONDS": "1",
            "CPERSONA_HTTP_BODY_TIMEOUT_SECONDS": "1",
            "CPERSONA_HTTP_KEEPALIVE_TIMEOUT_SECONDS": "1",
        },
    )
    server.start()
    try:
        async with connect(server.url, TOKEN) as tools:  # the event loop is up and serving
            await tools("list_memories", {"agent_id": "a"})
        baseline = server.open_sockets()
        head = post_head(server.port)
        with sockets() as opened:
            silent = [stalled(server.port, opened, b"") for _ in range(10)]
            half_headers = [stalled(server.port, opened, head) for _ in range(10)]
            half_body = [
                stalled(server.port, opened, head + b'Content-Length: 1000\r\n\r\n{"js')
                for _ in range(10)
            ]
            options = f"OPTIONS /mcp HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n\r\n"
            idle = stalled(server.port, opened, options.encode())
            trickler = stalled(server.port, opened, b"P")
            # A valid client is served while all of them hang on.
            async with connect(server.url, TOKEN) as tools:
                for i in range(5):
                    out = await tools("store", {"agent_id": "a", "message": {"content": f"n{i}"}})
                    assert out["result"] == "stored"
                recalled = await tools("recall", {"agent_id": "a", "query": "n3", "limit": 5})
                assert any(m["content"] == "n3" for m in recalled["messages"])
            # The trickler sends a byte of its headers every 0.2 s: the header deadline is a
            # deadline, not an idle timer, so it is closed anyway.
            deadline = time.monotonic() + WAIT
            trickled = 0
            for byte in head[1:]:
                if time.monotonic() > deadline:
                    break
                try:
                    trickler.sendall(bytes([byte]))
                except (BrokenPipeError, ConnectionResetError):
                    break
                trickled += 1
                time.sleep(0.2)
            assert trickled < len(head) - 1, "a trickled header was never cut off"
            deadline = time.monotonic() + WAIT
            for sock in silent + half_headers:
                assert status(until_closed(sock, deadline)) == 408
            for sock in half_body:  # the app has its request: the connection is just closed
                assert until_closed(sock, deadline) is not None
            kept_alive = until_closed(idle, deadline)
            assert status(kept_alive) not in (None, 408)  # answered, then closed when idle
        # Every descriptor of those connections is given back.
        deadline = time.monotonic() + WAIT
        while server.open_sockets() > baseline and time.monotonic() < deadline:
            time.sleep(0.1)
        # At most the baseline: it was read just after a client left, and that client's socket
        # may still have been closing then (seen under load: 4 at the baseline, 3 here).
        assert server.open_sockets() <= baseline
        async with connect(server.url, TOKEN) as tools:
            listed = await tools("list_memories", {"agent_id": "a"})
            assert listed["count"] == 5
    finally:
        server.stop()
    assert "Traceback" not in server.stderr
    # 30 stalled connections, two kinds of closing line: the log is rate-limited per kind.
    assert log_lines(server, "closed a connection") <= 10


@pytest.mark.anyio
async def test_at_the_bound_waiting_connections_make_room_then_newcomers_are_refused(tmp_path):
    """Bound 10. Ten silent connections fill it; a valid client is still served (it takes the
    place of the one that waited longest, which gets 503). Ten connections with a request in
    progress (headers sent, body pending) then push the rest of the silent ones out; with no
    waiting connection left, the next one is refused with 503 at once."""
    server = HttpServer(
        tmp_path,
        {
            "CPERSONA_AUTH_TOKEN": TOKEN,
            "CPERSONA_HTTP_MAX_CONNECTIONS": "10",
            "CPERSONA_HTTP_HEADER_TIMEOUT_SECONDS": "600",
            "CPERSONA_HTTP_BODY_TIMEOUT_SECONDS": "600",
        },
    )
    server.start()
    try:
        with sockets() as opened:
            silent = [stalled(server.port, opened, b"") for _ in range(10)]
            await stores(server.url, "in")
            body = post_head(server.port) + b'Content-Length: 1000\r\n\r\n{"js'
            busy = [stalled(server.port, opened, body) for _ in range(10)]
            deadline = time.monotonic() + WAIT
            for sock in silent:  # made room, oldest first: every one answered 503
                assert status(until_closed(sock, deadline)) == 503
            newcomer = stalled(server.port, opened, b"")
            answer = until_closed(newcomer, deadline)
            assert status(answer) == 503 and b"too_many_connections" in (answer or b"")
            ready, _, _ = select.select(busy, [], [], 0.5)
            assert ready == []  # requests in progress are never pushed out
        # Once they are gone, the bound has room again.
        await stores(server.url, "room again")
    finally:
        server.stop()
    assert "Traceback" not in server.stderr
    assert log_lines(server, "refused a connection") + log_lines(server, "make room") <= 10


@pytest.mark.anyio
async def test_running_out_of_descriptors_is_a_clean_refusal(tmp_path):
    """Under a 200-descriptor limit, 300 stalled connections: the excess is refused with 503
    before accept() can fail (it used to log a traceback per failed accept, thousands a
    second), and once the stalls time out a valid client is served again."""
    env = {"CPERSONA_AUTH_TOKEN": TOKEN, "CPERSONA_HTTP_HEADER_TIMEOUT_SECONDS": "2"}
    server = HttpServer(tmp_path, env, nofile=200)
    server.start()
    try:
        refused = 0
        with sockets() as opened:
            for _ in range(300):
                try:
                    stalled(server.port, opened, b"")
                except OSError:  # the listen queue is full: the kernel refused, fine too
                    refused += 1
            deadline = time.monotonic() + WAIT
            answers = [until_closed(sock, deadline) for sock in opened]
            assert all(a is not None for a in answers), "a stalled connection was never closed"
            refused += sum(status(a) == 503 for a in answers)
            assert refused >= 100  # the room the 200-descriptor limit leaves is about 100
            assert server.proc is not None and server.proc.poll() is None
        await stores(server.url, "still here")
    finally:
        server.stop()
    err = server.stderr
    assert "Traceback" not in err and "Too many open files" not in err
    assert len(err.splitlines()) < 60


@pytest.mark.anyio
async def test_clients_hanging_up_mid_body_cost_one_line_each_at_most(tmp_path):
    """150 clients send their headers and half a body, then hang up: no traceback (the SDK
    used to log each as an ERROR with a full ClientDisconnect traceback), at most one line
    each, and past the first few the lines are rate-limited."""
    server = HttpServer(tmp_path, {"CPERSONA_AUTH_TOKEN": TOKEN})
    server.start()
    try:
        head = post_head(server.port) + b"Content-Length: 1000\r\n\r\n"
        for i in range(150):
            with socket.create_connection(("127.0.0.1", server.port), timeout=WAIT) as sock:
                sock.sendall(head + b'{"jsonrpc":"2.0","id":%d,"method":"tools/call",' % i)
        await stores(server.url, "after")  # served after, and the log is flushed
    finally:
        server.stop()
    err = server.stderr
    assert "Traceback" not in err and "ERROR" not in err
    assert log_lines(server, "hung up") <= 5
    assert len(err.splitlines()) < 30
