"""Load over streamable HTTP: 8 concurrent clients × 500 mixed calls against one server process.

Each client owns one agent and repeats store, store, recall, update, store, delete (so 251
stores, 83 recalls, 83 updates and 83 deletes per client), through the official MCP client with
a bearer token, on 127.0.0.1. The eight clients share one event loop in this process; the
server is a real `cpersona serve --transport streamable-http` subprocess. One round: the
interesting numbers are the per-call latencies (p50 / p95 per tool, in `extra_info`), not the
round's total time. After the round the database is checked against what the clients were told
(no lost acknowledged write) before anything is reported.

Embedders: `hashing` (no model: what the transport, storage and index cost) and `local` (the
default all-MiniLM-L6-v2 int8 model, embedding every store, update and recall query).

Run: ``python -m pytest benches/test_http_load_bench.py --benchmark-enable -s``. Under
``--benchmark-disable`` (CI) it runs 30 calls per client as a smoke test.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

# The workload and the server harness are shared with the load test in tests/http.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from support.http_server import HttpServer
from support.load import lost_writes, percentile, run_load

TOKEN = "bench-token"
CLIENTS = 8
CALLS = 500
SMOKE_CALLS = 30


@pytest.mark.parametrize("embedder", ["hashing", "local"])
def test_http_load_bench(benchmark, tmp_path, embedder):
    calls = SMOKE_CALLS if benchmark.disabled else CALLS
    server = HttpServer(tmp_path, {
        "CPERSONA_AUTH_TOKEN": TOKEN, "CPERSONA_EMBEDDING_MODE": embedder,
        "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1",
    })  # fmt: skip
    server.start()
    try:
        # Warm the model and the connection path once, outside the timed round.
        run_load(server.url, TOKEN, clients=1, calls=6, tag="warm-up")
        result = benchmark.pedantic(
            run_load, args=(server.url, TOKEN), kwargs={"clients": CLIENTS, "calls": calls},
            rounds=1, iterations=1,
        )  # fmt: skip
    finally:
        assert server.stop() == 0, server.stderr
    assert result.errors == []
    assert lost_writes(server.db, result.ledgers) == []  # warm-up rows belong to other agents

    from cpersona import _backend

    KERNEL = _backend.from_environment().KERNEL

    benchmark.group = f"http load clients={CLIENTS} calls={calls}"
    info = benchmark.extra_info
    info.update(
        embedder=embedder,
        kernel=KERNEL,
        clients=CLIENTS,
        calls_per_client=calls,
        total_calls=result.calls,
        wall_s=round(result.wall, 2),
        calls_per_s=round(result.calls / result.wall, 1),
    )
    lines = [
        f"http load: {embedder}, {CLIENTS} clients x {calls} calls, "
        f"{result.calls / result.wall:.1f} calls/s over {result.wall:.1f} s"
    ]
    for tool, seconds in sorted(result.latencies.items()):
        p50, p95 = percentile(seconds, 0.50) * 1e3, percentile(seconds, 0.95) * 1e3
        info[f"{tool}_n"] = len(seconds)
        info[f"{tool}_p50_ms"] = round(p50, 1)
        info[f"{tool}_p95_ms"] = round(p95, 1)
        lines.append(f"  {tool:14s} n={len(seconds):5d}  p50 {p50:7.1f} ms  p95 {p95:7.1f} ms")
    print("\n" + "\n".join(lines))
