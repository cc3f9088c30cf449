"""The recorded handshake (server/handshake.py): a stdio server answers `initialize` and
`tools/list` from the answers an earlier start of the same install got from the MCP SDK, while
the SDK loads; the answers are the SDK's, byte for byte, for every protocol version a client
may ask for, and the SDK still serves the session afterwards.

Each test spawns real servers on one database with a cache directory of its own; whether an
answer came from the record is read from the server's debug log (never from a clock). The
`tools/list` answer of both starts is also compared with the golden file of the default
settings (test_server_tool_list.py has the other settings), so each version starts two servers
in all.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from child_env import inherited
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, LATEST_HANDSHAKE_VERSION

GOLDEN_LIST = (Path(__file__).with_name("golden") / "tools_list.default.json").read_bytes()
WAIT = 60.0  # seconds one exchange may take before the test fails (never a timing claim)
EARLY = "from the recorded handshake"


def initialize(version: str, request_id: int | str = 1) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "initialize",
        "params": {
            "protocolVersion": version,
            "capabilities": {"roots": {"listChanged": True}},
            "clientInfo": {"name": "cpersona-tests", "version": "0"},
        },
    }


INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}
LIST = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}


def store(request_id: int, content: str) -> dict[str, Any]:
    arguments = {"agent_id": "a", "message": {"content": content}}
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tools/call",
        "params": {"name": "store", "arguments": arguments},
    }


class Spawn:
    """One server process on `root`'s database and cache, spoken to line by line."""

    def __init__(self, root: Path, **env: str) -> None:
        base = inherited()
        base.update(
            CPERSONA_DB_PATH=str(root / "mem.db"),
            CPERSONA_EMBEDDING_MODE="hashing",
            CPERSONA_LOG_LEVEL="debug",
            XDG_CACHE_HOME=str(root / "cache"),
            **env,
        )
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "cpersona"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=base,
            cwd=root,
        )

    def send(self, *messages: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(b"".join(json.dumps(m).encode() + b"\n" for m in messages))
        self.proc.stdin.flush()

    def lines(self, count: int) -> list[bytes]:
        assert self.proc.stdout is not None
        out = [self.proc.stdout.readline() for _ in range(count)]
        assert all(out), "the server closed stdout early"
        return out

    def close(self) -> str:
        """Ends the session (stdin EOF); the server's stderr."""
        try:
            _, err = self.proc.communicate(timeout=WAIT)
        finally:
            self.discard()
        text = err.decode(errors="replace")
        assert self.proc.returncode == 0, text[-2000:]
        return text

    def discard(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=WAIT)
        for pipe in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if pipe is not None:
                pipe.close()


def handshake(root: Path, version: str, **env: str) -> tuple[list[bytes], str]:
    """initialize + initialized + tools/list, then one store: the three answer lines and
    the server's stderr."""
    server = Spawn(root, **env)
    try:
        server.send(initialize(version), INITIALIZED, LIST)
        answers = server.lines(2)
        server.send(store(3, f"said at {version}"))
        answers += server.lines(1)
        return answers, server.close()
    finally:
        server.discard()


def listed(line: bytes) -> bytes:
    """The `result` member of the `tools/list` answer line (id 2), as the server wrote it."""
    head, tail = b'{"jsonrpc":"2.0","id":2,"result":', b"}\n"
    assert line.startswith(head) and line.endswith(tail), line[:200]
    return line[len(head) : -len(tail)]


def early_answers(stderr: str) -> int:
    return sum(EARLY in line for line in stderr.splitlines())


#: Every version the handshake negotiates, the modern one asked for through the old handshake
#: (answered with the latest handshake version) and one no SDK knows.
VERSIONS = [*HANDSHAKE_PROTOCOL_VERSIONS, "2026-07-28", "1999-01-01"]


@pytest.mark.parametrize("version", VERSIONS)
def test_recorded_answers_are_the_sdks_byte_for_byte(tmp_path: Path, version: str) -> None:
    first, first_err = handshake(tmp_path, version)
    assert early_answers(first_err) == 0  # nothing recorded yet: the SDK answered
    negotiated = json.loads(first[0])["result"]["protocolVersion"]
    expected = version if version in HANDSHAKE_PROTOCOL_VERSIONS else LATEST_HANDSHAKE_VERSION
    assert negotiated == expected
    second, second_err = handshake(tmp_path, version)
    assert early_answers(second_err) == 2, second_err[-2000:]
    assert second[:2] == first[:2]
    assert listed(first[1]) == GOLDEN_LIST  # the SDK's answer, and so the record's
    # The SDK saw the session all the same: the store after it is served (a duplicate now).
    assert json.loads(json.loads(first[2])["result"]["content"][0]["text"])["result"] == "stored"
    later = json.loads(json.loads(second[2])["result"]["content"][0]["text"])
    assert later["result"] == "skipped"
    assert "differs" not in second_err


def test_a_call_sent_before_the_sdk_loaded_is_answered(tmp_path: Path) -> None:
    handshake(tmp_path, LATEST_HANDSHAKE_VERSION)
    server = Spawn(tmp_path)
    # All at once, as a client that pipelines: the call needs the SDK, which is still loading.
    server.send(initialize(LATEST_HANDSHAKE_VERSION, "init-1"), INITIALIZED, LIST, store(3, "x"))
    by_id = {json.loads(line)["id"]: json.loads(line) for line in server.lines(3)}
    err = server.close()
    assert early_answers(err) == 2
    assert set(by_id) == {"init-1", 2, 3}
    assert json.loads(by_id[3]["result"]["content"][0]["text"])["result"] == "stored"


def test_other_settings_find_no_record(tmp_path: Path) -> None:
    first, _ = handshake(tmp_path, LATEST_HANDSHAKE_VERSION)
    _, other_err = handshake(tmp_path, LATEST_HANDSHAKE_VERSION, CPERSONA_MAX_CONTENT_LENGTH="100")
    assert early_answers(other_err) == 0
    again, again_err = handshake(tmp_path, LATEST_HANDSHAKE_VERSION)
    assert early_answers(again_err) == 2 and again[:2] == first[:2]


def test_a_record_that_differs_from_the_sdk_is_dropped(tmp_path: Path) -> None:
    first, _ = handshake(tmp_path, LATEST_HANDSHAKE_VERSION)
    (record,) = (tmp_path / "cache" / "cpersona").glob("handshake-*.json")
    data = json.loads(record.read_text())
    answer = data["answers"][LATEST_HANDSHAKE_VERSION]["tools/list"]
    answer["tail"] = answer["tail"].replace("Stop", "Halt", 1)
    record.write_text(json.dumps(data))
    tampered, err = handshake(tmp_path, LATEST_HANDSHAKE_VERSION)
    assert tampered[1] != first[1]  # what the record said went out...
    assert "differs from the SDK's answer" in err  # ...was caught against the SDK's
    assert not record.exists()
    healed, healed_err = handshake(tmp_path, LATEST_HANDSHAKE_VERSION)
    assert early_answers(healed_err) == 0 and healed[:2] == first[:2]
    again, again_err = handshake(tmp_path, LATEST_HANDSHAKE_VERSION)
    assert early_answers(again_err) == 2 and again[:2] == first[:2]


def test_an_unusual_initialize_waits_for_the_sdk(tmp_path: Path) -> None:
    handshake(tmp_path, LATEST_HANDSHAKE_VERSION)
    odd = initialize(LATEST_HANDSHAKE_VERSION)
    odd["params"]["clientInfo"] = {"name": "no version"}  # the SDK refuses this one
    server = Spawn(tmp_path)
    server.send(odd)
    (line,) = server.lines(1)
    err = server.close()
    assert early_answers(err) == 0
    assert "error" in json.loads(line)
