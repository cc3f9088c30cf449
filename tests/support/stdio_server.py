"""A real `python -m cpersona` stdio server on pipes, for tests and benchmarks that need the
process: its stdout read line by line, its stderr (the server's log) kept in a file."""

from __future__ import annotations

import contextlib
import json
import queue
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from child_env import inherited

from support import jsonrpc

WAIT = 30.0  # seconds any single answer may take before the test fails (never a timing claim)


def server_env(db: Path) -> dict[str, str]:
    return {"CPERSONA_DB_PATH": str(db), "CPERSONA_EMBEDDING_MODE": "hashing"}


class RawServer:
    """`python -m cpersona` on pipes: write any line, read answers by JSON-RPC id."""

    def __init__(
        self,
        db: Path,
        extra_env: dict[str, str] | None = None,
        *,
        argv: list[str] | None = None,
        stderr_path: Path | None = None,
    ) -> None:
        """`extra_env` wins over the test defaults (`server_env`); `argv`: another command than
        `python -m cpersona`; `stderr_path`: where the log goes (default: beside `db`)."""
        self.stderr_path = stderr_path or db.with_name(db.name + f".{id(self)}.stderr")
        self._stderr = open(self.stderr_path, "wb")  # noqa: SIM115 - closed in close()
        self.proc = subprocess.Popen(
            argv or [sys.executable, "-m", "cpersona"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            env={**inherited(), **server_env(db), **(extra_env or {})},
            cwd=db.parent,
        )
        self.lines: list[bytes] = []
        self._answers: queue.Queue[dict[str, Any]] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self._next_id = 1000

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in iter(self.proc.stdout.readline, b""):
            self.lines.append(line)
            with contextlib.suppress(ValueError):
                message = json.loads(line)
                if isinstance(message, dict) and "id" in message:
                    self._answers.put(message)

    def send(self, line: str | bytes | dict[str, Any]) -> None:
        if isinstance(line, dict):
            line = json.dumps(line)
        data = line.encode() if isinstance(line, str) else line
        assert self.proc.stdin is not None
        self.proc.stdin.write(data + b"\n")
        self.proc.stdin.flush()

    def request(self, method: str, params: dict[str, Any] | None = None) -> int:
        self._next_id += 1
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": self._next_id, "method": method}
        if params is not None:
            message["params"] = params
        self.send(message)
        return self._next_id

    def answer(self, request_id: int) -> dict[str, Any]:
        """The answer to `request_id` (answers to other ids that arrive first are kept)."""
        pending = getattr(self, "_pending", {})
        self._pending = pending
        for _ in range(10_000):
            if request_id in pending:
                return pending.pop(request_id)
            message = self._answers.get(timeout=WAIT)
            pending[message["id"]] = message
        raise AssertionError(f"no answer to {request_id}")

    def call(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        return self.answer(self.request(method, params))

    def tool(self, name: str, arguments: Any) -> dict[str, Any]:
        message = self.call("tools/call", {"name": name, "arguments": arguments})
        assert "result" in message, message
        return json.loads(message["result"]["content"][0]["text"])

    def tools(self, calls: list[tuple[str, dict[str, Any]]]) -> list[dict[str, Any]]:
        """Send every call at once (one write of pipelined lines), then read as many answers,
        in the order they come."""
        self._next_id += len(calls)
        first = self._next_id - len(calls) + 1
        lines = [
            {"jsonrpc": "2.0", "id": first + i, "method": "tools/call",
             "params": {"name": name, "arguments": arguments}}
            for i, (name, arguments) in enumerate(calls)
        ]  # fmt: skip
        assert self.proc.stdin is not None
        self.proc.stdin.write(b"".join(json.dumps(line).encode() + b"\n" for line in lines))
        self.proc.stdin.flush()
        answers = [self._answers.get(timeout=WAIT) for _ in calls]
        return [json.loads(a["result"]["content"][0]["text"]) for a in answers]

    def initialize(self) -> dict[str, Any]:
        answer = self.call("initialize", jsonrpc.initialize()["params"])
        self.send(jsonrpc.INITIALIZED)
        return answer

    def close(self) -> int:
        if self.proc.poll() is None:
            with contextlib.suppress(BrokenPipeError):
                assert self.proc.stdin is not None
                self.proc.stdin.close()
            try:
                self.proc.wait(timeout=WAIT)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=WAIT)
        self._reader.join(timeout=WAIT)
        for pipe in (self.proc.stdin, self.proc.stdout):
            with contextlib.suppress(OSError):
                if pipe is not None:
                    pipe.close()
        self._stderr.close()
        return self.proc.returncode

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=WAIT)

    @property
    def stderr(self) -> str:
        return self.stderr_path.read_text(encoding="utf-8", errors="replace")
