"""Stalled connections against a server with the default timeouts (issue 11.4's experiment).

Opens `--count` connections to a real HTTP server on 127.0.0.1 (default 250, a third each:
silent, half the headers, headers and half a body), then serves a valid client every second
while measuring how long the server takes to close each stalled connection, its open
descriptors before, at the peak and after, and its log. Then the same past the connection
bound under a low open-file limit (`--nofile`, default 1024): `--flood` connections (default
1100) at once, how many are refused with 503, whether a valid client is served once the stalls
time out, and the log's size.

Run: ``python benches/stalls.py`` (about 30 s with the defaults). Not a test: it reports times.
"""

from __future__ import annotations

import argparse
import selectors
import socket
import sys
import tempfile
import time
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from support.http_server import HttpServer, connect

TOKEN = "stalls-token"
WAIT = 120.0


def head(port: int) -> bytes:
    return (
        f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {TOKEN}\r\n"
        "Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"
    ).encode()


def open_stalls(port: int, count: int) -> list[socket.socket]:
    kinds = [b"", head(port), head(port) + b'Content-Length: 1000\r\n\r\n{"js']
    opened = []
    for i in range(count):
        try:
            sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        except OSError:
            continue
        if kinds[i % 3]:
            sock.sendall(kinds[i % 3])
        opened.append(sock)
    return opened


def closing_times(
    socks: list[socket.socket], start: float, server: HttpServer
) -> list[float | None]:
    """Seconds from `start` until the server closed each socket; a valid call every second."""
    closed: dict[int, float] = {}
    served = failed = 0
    status: dict[int, bytes] = {}
    deadline = start + WAIT
    next_call = time.monotonic()
    peak = server.descriptors()
    watch = selectors.DefaultSelector()  # epoll: select() stops at descriptor 1024
    for sock in socks:
        watch.register(sock, selectors.EVENT_READ)
    while len(closed) < len(socks) and time.monotonic() < deadline:
        for key, _ in watch.select(0.2):
            sock = key.fileobj
            assert isinstance(sock, socket.socket)
            try:
                data = sock.recv(4096)
            except ConnectionResetError:
                data = b""
            if data:
                status.setdefault(sock.fileno(), data[:12])
            else:
                closed[sock.fileno()] = time.monotonic() - start
                watch.unregister(sock)
        if time.monotonic() >= next_call:
            peak = max(peak, server.descriptors())
            next_call += 1.0
            try:
                anyio.run(one_call, server.url)
                served += 1
            except Exception:
                failed += 1
    print(f"  valid calls while stalled: {served} served, {failed} failed; peak fds {peak}")
    codes: dict[bytes, int] = {}
    for data in status.values():
        codes[data[9:12]] = codes.get(data[9:12], 0) + 1
    print(f"  answers before closing: {codes} (the rest closed without an answer)")
    return [closed.get(s.fileno()) for s in socks]


async def one_call(url: str) -> None:
    with anyio.fail_after(30):
        async with connect(url, TOKEN) as tools:
            out = await tools("store", {"agent_id": "probe", "message": {"content": "probe"}})
            assert out["ok"] is True, out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=250)
    parser.add_argument("--flood", type=int, default=1100)
    parser.add_argument("--nofile", type=int, default=1024)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="cpersona-stalls-") as tmp:
        server = HttpServer(Path(tmp), {"CPERSONA_AUTH_TOKEN": TOKEN})
        server.start()
        try:
            before = server.descriptors()
            start = time.monotonic()
            socks = open_stalls(server.port, args.count)
            print(f"stalls: {len(socks)} stalled connections, default timeouts; fds {before}")
            times = closing_times(socks, start, server)
            done = [t for t in times if t is not None]
            print(
                f"  closed by the server: {len(done)} of {len(socks)}; "
                f"first {min(done):.1f} s, last {max(done):.1f} s after opening"
                if done
                else "  none closed"
            )
            for sock in socks:
                sock.close()
            time.sleep(1)
            print(f"  fds after: {server.descriptors()}")
        finally:
            server.stop()
        err = server.stderr
        print(f"  log: {len(err.splitlines())} lines, {err.count('Traceback')} tracebacks")

        flood_dir = Path(tmp) / "flood"
        flood_dir.mkdir()
        server = HttpServer(flood_dir, {"CPERSONA_AUTH_TOKEN": TOKEN}, nofile=args.nofile)
        server.start()
        try:
            start = time.monotonic()
            socks = open_stalls(server.port, args.flood)
            print(
                f"flood: {len(socks)} of {args.flood} connections opened under a "
                f"{args.nofile}-descriptor limit"
            )
            times = closing_times(socks, start, server)
            done = [t for t in times if t is not None]
            print(f"  closed by the server: {len(done)} of {len(socks)}")
            for sock in socks:
                sock.close()
        finally:
            server.stop()
        err = server.stderr
        print(
            f"  log: {len(err.splitlines())} lines, {err.count('Traceback')} tracebacks, "
            f"{err.count('Too many open files')} 'Too many open files'"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
