"""A real `cpersona serve --transport streamable-http` process on a loopback port, and the
official MCP client talking to it with a bearer token.

The server is started with `CPERSONA_HTTP_PORT=0` (the OS picks a free port) and the URL is read
from its start-up banner, so parallel runs never race for a port. Every wait is bounded.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import resource
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from pathlib import Path

import anyio
import httpx2
from child_env import inherited
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from support import jsonrpc
from support.mcp_client import Tools

WAIT = 30.0  # seconds any start, stop or answer may take before the test fails (no timing claim)
_URL = re.compile(r"^  url: (http://127\.0\.0\.1:\d+/mcp)$", re.MULTILINE)


class HttpServer:
    """One server process; `start()` returns once the banner names the URL."""

    #: The banner line that names the URL to connect to.
    url_pattern = _URL

    def __init__(
        self,
        workdir: Path,
        env: dict[str, str] | None = None,
        name: str = "server",
        *,
        nofile: int | None = None,
    ) -> None:
        """`nofile`: the process's open-file limit (soft and hard), lowered from the inherited."""
        self.workdir = workdir
        self.nofile = nofile
        self.db = workdir / f"{name}.db"
        base = inherited("SYSTEMROOT")
        self.env = {
            **base,
            "CPERSONA_DB_PATH": str(self.db),
            "CPERSONA_EMBEDDING_MODE": "hashing",
            "CPERSONA_HTTP_HOST": "127.0.0.1",
            "CPERSONA_HTTP_PORT": "0",
            **(env or {}),
        }
        self.stderr_path = workdir / f"{name}.stderr"
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = ""

    def argv(self) -> list[str]:
        return [sys.executable, "-m", "cpersona", "serve", "--transport", "streamable-http"]

    def launch(self) -> subprocess.Popen[bytes]:
        limit = self.nofile

        def lower_nofile() -> None:
            assert limit is not None
            resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))

        with open(self.stderr_path, "wb") as err:
            self.proc = subprocess.Popen(
                self.argv(),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=err,
                env=self.env,
                cwd=self.workdir,
                preexec_fn=None if limit is None else lower_nofile,
            )
        return self.proc

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1].split("/")[0])

    def descriptors(self) -> int:
        """The process's open descriptors, of every kind."""
        assert self.proc is not None
        return len(os.listdir(f"/proc/{self.proc.pid}/fd"))

    def open_sockets(self) -> int:
        """Open socket descriptors (the listener and the connections; not the database's)."""
        assert self.proc is not None
        count = 0
        for fd in Path(f"/proc/{self.proc.pid}/fd").iterdir():
            with contextlib.suppress(OSError):  # closed since the listing
                count += os.readlink(fd).startswith("socket:")
        return count

    def start(self) -> str:
        proc = self.launch()
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline:
            found = self.url_pattern.search(self.stderr)
            if found:
                self.url = found.group(1)
                return self.url
            if proc.poll() is not None:
                raise AssertionError(f"server exited {proc.returncode}:\n{self.stderr}")
            time.sleep(0.05)
        self.stop()
        raise AssertionError(f"no URL in the banner within {WAIT}s:\n{self.stderr}")

    def __enter__(self) -> HttpServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        """A clean exit: status 0 after SIGTERM (with the log when not)."""
        assert self.stop() == 0, self.stderr

    def wait_exit(self) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout=WAIT)

    @property
    def stderr(self) -> str:
        return self.stderr_path.read_text(encoding="utf-8", errors="replace")

    def stop(self) -> int | None:
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=WAIT)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=WAIT)
            raise AssertionError(f"server ignored SIGTERM:\n{self.stderr}") from None


@contextlib.asynccontextmanager
async def connect(url: str, token: str | None, *, mode: str = "auto") -> AsyncIterator[Tools]:
    """The official client over streamable HTTP, sending `Authorization: Bearer <token>`.

    `mode="auto"` negotiates the 2026 per-request protocol; `"legacy"` the initialize handshake.
    """
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(WAIT)) as http,
        Client(streamable_http_client(url, http_client=http), mode=mode) as client,
    ):
        yield Tools(client)


def post(url: str, body: bytes, headers: dict[str, str] | None = None) -> httpx2.Response:
    """One raw POST (for what the MCP client cannot send: no token, an oversized body)."""
    base = {"content-type": "application/json", "accept": "application/json, text/event-stream"}
    return httpx2.post(url, content=body, headers={**base, **(headers or {})}, timeout=WAIT)


def initialize_body() -> bytes:
    return json.dumps(jsonrpc.initialize(client="tests")).encode()


async def interleaved(
    url: str,
    tokens: Mapping[str, str | None],
    check: Callable[[Tools, str, int], Awaitable[str | None]],
    *,
    tasks: int,
    steps: int,
) -> list[str]:
    """`tasks` connections per caller (name -> token), all at once, each making `steps` calls
    through `check(tools, name, step)`, which returns what was wrong with the answer, if
    anything. Returns every mistake, named `caller#task step n`: interleaved callers must each
    get their own answer (no identity or alias leaks across concurrent sessions)."""
    mistakes: list[str] = []

    async def lane(name: str, task: int) -> None:
        async with connect(url, tokens[name]) as tools:
            for step in range(steps):
                wrong = await check(tools, name, step)
                if wrong is not None:
                    mistakes.append(f"{name}#{task} step {step}: {wrong}")

    async with anyio.create_task_group() as tg:
        for task in range(tasks):
            for name in tokens:
                tg.start_soon(lane, name, task)
    return mistakes
