"""What a stdio server loads before its first answers (docs/notes/performance-notes.md, "Start-up").

A client spawns `python -m cpersona` and waits for `initialize` and `tools/list` before it can
do anything, so those two answers must not wait for numpy, the embedders, the index files,
jsonschema or the Rust extension: they load with the first tool call. Read without a clock:
the server runs under `python -X importtime`, which writes one stderr line per module imported;
after `tools/list` the test closes stdin, the server exits, and the lines name every module the
process ever imported. The same server given one tool call imports them (the control).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from child_env import inherited
from support import jsonrpc

WAIT = 60.0  # seconds the whole exchange may take before the test fails (never a timing claim)

#: Modules the first answers must not need: numeric, model, validation and index code.
HEAVY = (
    "numpy",
    "onnxruntime",
    "tokenizers",
    "jsonschema",
    "cpersona._core",
    "cpersona._fallback",
    "cpersona.vectors.index",
    "cpersona.retrieval.pipeline",
    "cpersona.embedding.base",
    "cpersona.memory.writes",
)

INITIALIZE = jsonrpc.initialize()
INITIALIZED = jsonrpc.INITIALIZED
LIST = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
STORE = {
    "jsonrpc": "2.0",
    "id": 3,
    "method": "tools/call",
    "params": {"name": "store", "arguments": {"agent_id": "a", "message": {"content": "hello"}}},
}


def serve(db: Path, messages: list[dict[str, Any]]) -> tuple[dict[int, Any], set[str]]:
    """Sends `messages`, waits for every request's answer, then closes stdin.

    Returns the answers by id and every module the process imported."""
    env = inherited()
    env.update(CPERSONA_DB_PATH=str(db), CPERSONA_EMBEDDING_MODE="hashing")
    stderr = db.with_name("server.stderr")
    with open(stderr, "wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-X", "importtime", "-m", "cpersona"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=err,
            env=env,
            cwd=db.parent,
        )
        assert proc.stdin is not None and proc.stdout is not None
        try:
            proc.stdin.write(b"".join(json.dumps(m).encode() + b"\n" for m in messages))
            proc.stdin.flush()
            wanted = {m["id"] for m in messages if "id" in m}
            answers: dict[int, Any] = {}
            # An answer per line; the loop ends at stdout's end if the server dies first.
            for line in iter(proc.stdout.readline, b""):
                message = json.loads(line)
                if "id" in message:
                    answers[message["id"]] = message
                if wanted <= answers.keys():
                    break
            proc.stdin.close()
            code = proc.wait(timeout=WAIT)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=WAIT)
            proc.stdout.close()
    log = stderr.read_text(encoding="utf-8", errors="replace")
    assert code == 0, log[-2000:]
    imported = set()
    for line in log.splitlines():
        if line.startswith("import time:") and "|" in line:
            name = line.rsplit("|", 1)[1].strip()
            if name != "imported package":
                imported.add(name)
    return answers, imported


def heavy(imported: set[str]) -> set[str]:
    return {m for m in imported if any(m == h or m.startswith(h + ".") for h in HEAVY)}


def test_initialize_and_tools_list_load_none_of_the_heavy_modules(tmp_path: Path) -> None:
    answers, imported = serve(tmp_path / "mem.db", [INITIALIZE, INITIALIZED, LIST])
    assert answers[1]["result"]["serverInfo"]["name"] == "cloto-mcp-cpersona"
    tools = {t["name"] for t in answers[2]["result"]["tools"]}
    assert {"store", "recall", "check_health", "deep_check", "calibrate_threshold"} <= tools
    assert "mcp.server.stdio" in imported  # the log is read: the SDK itself is listed
    assert heavy(imported) == set()


def test_answers_from_the_recorded_handshake_load_none_of_them_either(tmp_path: Path) -> None:
    # The first start records the SDK's answers (server/handshake.py); the second answers from
    # them while the SDK loads in the background, and ends (stdin closed) before any tool call.
    first, _ = serve(tmp_path / "mem.db", [INITIALIZE, INITIALIZED, LIST])
    again, imported = serve(tmp_path / "mem.db", [INITIALIZE, INITIALIZED, LIST])
    assert again == first
    assert heavy(imported) == set()


def test_the_first_tool_call_loads_them(tmp_path: Path) -> None:
    answers, imported = serve(tmp_path / "mem.db", [INITIALIZE, INITIALIZED, LIST, STORE])
    out = json.loads(answers[3]["result"]["content"][0]["text"])
    assert out["ok"] is True and out["embedded"] is True
    assert {"numpy", "jsonschema", "cpersona.vectors.index", "cpersona.memory.writes"} <= heavy(
        imported
    )
