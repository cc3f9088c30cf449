"""Start-up: spawn `python -m cpersona` and time until `tools/list` is answered (issues 9, 20).

What an MCP client waits for before it can call anything: the process starts, `initialize`,
`notifications/initialized` and `tools/list` are written at once (as clients do), and the clock
stops when the `tools/list` answer is read. Each spawn is a fresh process on a fresh database
with `CPERSONA_EMBEDDING_MODE=hashing` (the default `local` mode loads its model on first use
too, so the path to tools/list is the same). Two server rows: `first`, with no recorded
handshake (the SDK answers: the first start of an install, or after any change of it), and
`recorded`, a later start on the same install and settings, answered from the record while the
SDK loads (server/handshake.py).

Two more figures, measured the same way in the same loop, bound what start-up can reach:
`python -c pass` (the interpreter) and `python -c "import mcp.server.stdio,
mcp.server.lowlevel.server"` (the MCP SDK the server is built on). Besides wall time, each row
reports the child's CPU time (user + system, from /proc) at the moment it answered, which the
other load on a shared machine inflates less than wall time.

Run: ``python -m pytest benches/test_startup_bench.py --benchmark-enable -s``
(``CPERSONA_BENCH_SPAWNS`` spawns per row, default 30). Without ``--benchmark-enable``: 2 spawns.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest
import scale_support as scale
from support import jsonrpc

SPAWNS = int(os.environ.get("CPERSONA_BENCH_SPAWNS", "30"))
SMOKE_SPAWNS = 2
WAIT = 120.0
TICK = os.sysconf("SC_CLK_TCK")
HANDSHAKE = b"".join(
    json.dumps(m).encode() + b"\n"
    for m in (
        jsonrpc.initialize(client="cpersona-bench"),
        jsonrpc.INITIALIZED,
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
    )
)
SDK_IMPORT = "import mcp.server.stdio, mcp.server.lowlevel.server"


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK  # utime + stime


def spawn_server(env: dict[str, str]) -> tuple[float, float]:
    """Wall seconds from spawn to the tools/list answer, and the server's CPU seconds by then."""
    start = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "cpersona"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        proc.stdin.write(HANDSHAKE)
        proc.stdin.flush()
        for line in iter(proc.stdout.readline, b""):
            answer = json.loads(line)
            if answer.get("id") == 2:
                wall = time.perf_counter() - start
                cpu = cpu_seconds(proc.pid)
                assert len(answer["result"]["tools"]) >= 30, answer
                return wall, cpu
        raise AssertionError("the server closed stdout before answering tools/list")
    finally:
        proc.stdin.close()
        proc.wait(timeout=WAIT)
        proc.stdout.close()


def spawn_python(code: str, env: dict[str, str]) -> tuple[float, float]:
    """Wall seconds of `python -c code` to its exit, and its CPU seconds when `code` has run
    (read by the child itself, so that interpreter teardown is left out as for the server)."""
    report = "; import os; t = os.times(); print(t.user + t.system)"
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", code + report],
        env=env,
        check=True,
        timeout=WAIT,
        capture_output=True,
    )
    return time.perf_counter() - start, float(done.stdout)


def summary(samples: list[tuple[float, float]]) -> dict[str, float]:
    walls = sorted(w for w, _ in samples)
    cpus = sorted(c for _, c in samples)
    q = statistics.quantiles(walls, n=10) if len(walls) > 1 else [walls[0]] * 9
    return {
        "wall_min_ms": round(walls[0] * 1e3, 1),
        "wall_p50_ms": round(statistics.median(walls) * 1e3, 1),
        "wall_p10_ms": round(q[0] * 1e3, 1),
        "wall_p90_ms": round(q[-1] * 1e3, 1),
        "wall_max_ms": round(walls[-1] * 1e3, 1),
        "cpu_min_ms": round(cpus[0] * 1e3, 1),
        "cpu_p50_ms": round(statistics.median(cpus) * 1e3, 1),
    }


@pytest.mark.timeout(3600)
def test_spawn_to_tools_list(benchmark, tmp_path, request) -> None:
    spawns = SPAWNS if scale.full_run(request.config) else SMOKE_SPAWNS
    base = {k: os.environ[k] for k in ("PATH", "HOME", "PYTHONPATH") if k in os.environ}
    cache = tmp_path / "cache"
    server_env = {
        **base,
        "CPERSONA_DB_PATH": str(tmp_path / "mem.db"),
        "CPERSONA_EMBEDDING_MODE": "hashing",
        "XDG_CACHE_HOME": str(cache),
    }
    rows: dict[str, list[tuple[float, float]]] = {
        "python": [],
        "sdk": [],
        "first": [],  # no recorded handshake: the SDK answers (the first start of an install)
        "recorded": [],  # every later start: answered from the record while the SDK loads
    }

    def first_start() -> tuple[float, float]:
        for record in cache.glob("cpersona/handshake-*.json"):
            record.unlink()
        return spawn_server(server_env)

    def run() -> None:
        # Interleaved, so the rows see the same background load.
        for i in range(spawns):
            (tmp_path / "mem.db").unlink(missing_ok=True)
            if i % 2:  # alternate the order too
                rows["first"].append(first_start())
                rows["recorded"].append(spawn_server(server_env))
            rows["python"].append(spawn_python("pass", base))
            rows["sdk"].append(spawn_python(SDK_IMPORT, base))
            if not i % 2:
                rows["first"].append(first_start())
                rows["recorded"].append(spawn_server(server_env))

    benchmark.group = "start-up: spawn -> tools/list"
    benchmark.pedantic(run, rounds=1, iterations=1)
    info = {name: summary(samples) for name, samples in rows.items()}
    benchmark.extra_info.update(spawns=spawns, load_avg=os.getloadavg()[0], **info)
    print(f"\nstart-up, {spawns} spawns each, load average {os.getloadavg()[0]:.1f}")
    for name, s in info.items():
        print(
            f"  {name:9s} wall p50 {s['wall_p50_ms']:7.1f} ms (min {s['wall_min_ms']:.1f}, "
            f"p10-p90 {s['wall_p10_ms']:.1f}-{s['wall_p90_ms']:.1f}, max {s['wall_max_ms']:.1f})"
            f"  cpu p50 {s['cpu_p50_ms']:.1f} ms (min {s['cpu_min_ms']:.1f})"
        )
