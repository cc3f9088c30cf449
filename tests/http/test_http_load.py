"""Eight HTTP clients at once against one server process (surface.md §11.1: one process serves
all clients): a bounded mix of store / recall / update / delete per client finishes with no
error and no lost acknowledged write, and the vector index then verifies against SQLite.

Counts only, never timings: the timed version is benches/test_http_load_bench.py.
"""

from __future__ import annotations

import subprocess
import sys

from support.http_server import WAIT, HttpServer
from support.load import lost_writes, run_load

TOKEN = "load-test-token"
CLIENTS = 8
CALLS = 60


def test_http_load_concurrent_clients_lose_nothing(tmp_path):
    server = HttpServer(tmp_path, {"CPERSONA_AUTH_TOKEN": TOKEN})
    server.start()
    try:
        result = run_load(server.url, TOKEN, clients=CLIENTS, calls=CALLS)
    finally:
        assert server.stop() == 0, server.stderr
    assert result.errors == []
    assert result.calls == CLIENTS * CALLS
    assert set(result.latencies) == {"store", "recall", "update_memory", "delete_memory"}
    assert lost_writes(server.db, result.ledgers) == []
    assert all(ledger.deleted and ledger.live for ledger in result.ledgers)
    assert "Traceback" not in server.stderr and " ERROR" not in server.stderr
    verify = subprocess.run(
        [sys.executable, "-m", "cpersona", "index", "verify"],
        env={**server.env}, capture_output=True, text=True, timeout=WAIT, cwd=tmp_path,
    )  # fmt: skip
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert "memories: OK" in verify.stdout and "episodes: OK" in verify.stdout
