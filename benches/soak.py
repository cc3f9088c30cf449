"""Soak: one HTTP server under 8 clients for 10 minutes of bursts and idle gaps (issue 11).

A real `cpersona serve --transport streamable-http` subprocess on 127.0.0.1, the `hashing`
embedder by default (what the transport, storage and index cost; `--embedder local` for the
default model). Eight clients in this process run cycles: each opens a fresh MCP connection,
makes a burst of mixed calls (store, store, recall, update, store, delete: support.load's
pattern), deletes what it stored (so the data set stays the same size and any growth is the
server's own), closes; then every client idles for a gap. Bursts and gaps vary (5-40 calls,
0-25 s, fixed seed); a gap over 10 s lets the server's worker threads retire, the case that
leaked a reader per thread (issue 11.1).

Sampled every 2 s from /proc/<pid>: open descriptors and VmRSS. "Flat" compares like with like:
the samples at the end of the idle gaps of 12 s or more (no call in flight, idle worker threads
retired), the first after two warm-up ones against the last; both must stay within 10 %.
Latency: p50 / p99 per tool and overall.
Afterwards the database is checked against what the clients were told (no lost write).

Run: ``python benches/soak.py`` (10 minutes) or ``python benches/soak.py --duration 60``;
``--json out.json`` keeps the samples. Not a test: it takes minutes, and its figures depend on
the machine. Exit status 1 when a flatness target or the ledger check fails.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import threading
import time
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from support.http_server import HttpServer, connect
from support.load import Ledger, call, lost_writes, next_call, percentile, sentence

TOKEN = "soak-token"
CLIENTS = 8
WARMUP_CYCLES = 2
LONG_GAP = 12.0
FLAT = 0.10


@dataclass
class Sample:
    t: float
    fds: int
    rss_kb: int
    phase: str  # "burst", "gap" or "gap-end"
    gap: float = 0.0  # at a gap end: how long the gap was
    kinds: dict[str, int] = field(default_factory=dict)  # at a gap end: descriptors by target


@dataclass
class Soak:
    duration: float
    cycles: int = 0
    samples: list[Sample] = field(default_factory=list)
    latencies: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    ledgers: list[Ledger] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)


def fd_kinds(pid: int) -> dict[str, int]:
    """Open descriptors by what they point at: socket, pipe, anon_inode or the file's name."""
    kinds: dict[str, int] = defaultdict(int)
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        kind = target.split(":", 1)[0] if ":" in target else Path(target).name
        kinds[kind] += 1
    return dict(kinds)


def read_proc(pid: int) -> tuple[int, int]:
    fds = len(os.listdir(f"/proc/{pid}/fd"))
    rss = 0
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1])
    return fds, rss


async def burst(url: str, client: int, cycle: int, calls: int, soak: Soak) -> None:
    ledger = Ledger(agent=f"soak-{cycle}-{client}")
    soak.ledgers.append(ledger)
    async with connect(url, TOKEN) as tools:
        for step in range(calls):
            op, args = next_call(
                ledger,
                step,
                store=(f"{cycle}-{step}", sentence(client, step)),
                query=sentence(client, step),
                edit=sentence(client, step + 1) + " (edited)",
            )
            await call(tools, ledger, op, args, soak.latencies)
        for memory_id in sorted(ledger.live):  # the data set stays the same size
            args = {"agent_id": ledger.agent, "memory_id": memory_id}
            await call(tools, ledger, "delete_memory", args, soak.latencies)


def run(url: str, pid: int, soak: Soak, seed: int) -> None:
    rng = random.Random(seed)
    phase = ["burst"]
    stop = threading.Event()

    def sampler() -> None:
        start = time.monotonic()
        while not stop.wait(2.0):
            fds, rss = read_proc(pid)
            soak.samples.append(Sample(round(time.monotonic() - start, 1), fds, rss, phase[0]))

    thread = threading.Thread(target=sampler, daemon=True)
    thread.start()
    deadline = time.monotonic() + soak.duration
    try:
        while time.monotonic() < deadline:
            calls = [rng.randint(5, 40) for _ in range(CLIENTS)]
            phase[0] = "burst"

            async def cycle(calls: list[int] = calls) -> None:
                async with anyio.create_task_group() as tg:
                    for client, n in enumerate(calls):
                        tg.start_soon(burst, url, client, soak.cycles, n, soak)

            anyio.run(cycle)
            soak.cycles += 1
            phase[0] = "gap"
            gap = rng.choice([0.0, 2.0, 5.0, 12.0, 25.0])
            time.sleep(max(0.0, min(gap, deadline - time.monotonic())))
            fds, rss = read_proc(pid)
            at = soak.samples[-1].t if soak.samples else 0.0
            soak.samples.append(Sample(at, fds, rss, "gap-end", gap, fd_kinds(pid)))
    finally:
        stop.set()
        thread.join(timeout=10)


def growth(values: list[int]) -> float:
    return (values[-1] - values[0]) / values[0] if values and values[0] else 0.0


def _flatness(name: str, values: list[int], peak: int, scale: int, unit: str) -> str:
    if not values:
        return f"  {name}: no samples after a long idle gap"
    first, last, top = (v / scale for v in (values[0], values[-1], max(values)))
    return (
        f"  {name} after long idle gaps: first {first:.1f}{unit}, last {last:.1f}{unit}, "
        f"max {top:.1f}{unit} ({growth(values):+.1%}); max of all samples {peak / scale:.1f}{unit}"
    )


def report(soak: Soak, stderr: str) -> list[str]:
    # Like with like: the ends of gaps long enough for idle worker threads to retire (anyio
    # retires them after 10 s), past the warm-up cycles.
    ends = [s for s in soak.samples if s.phase == "gap-end" and s.gap >= LONG_GAP]
    ends = ends[WARMUP_CYCLES:]
    fds = [s.fds for s in ends]
    rss = [s.rss_kb for s in ends]
    every = [x for values in soak.latencies.values() for x in values]
    lines = [
        f"soak: {CLIENTS} clients, {soak.cycles} cycles over {soak.duration:.0f} s, "
        f"{len(every)} calls, {len(soak.samples)} samples",
        _flatness("descriptors", fds, max(s.fds for s in soak.samples), 1, ""),
        _flatness("RSS", rss, max(s.rss_kb for s in soak.samples), 1024, " MB"),
    ]
    if ends:
        lines.append(f"  descriptors after the first long gap: {ends[0].kinds}")
        lines.append(f"  descriptors after the last long gap:  {ends[-1].kinds}")
    for tool, seconds in sorted(soak.latencies.items()):
        lines.append(
            f"  {tool:14s} n={len(seconds):6d}  p50 {percentile(seconds, 0.5) * 1e3:7.1f} ms  "
            f"p99 {percentile(seconds, 0.99) * 1e3:7.1f} ms  max {max(seconds) * 1e3:7.1f} ms"
        )
    lines.append(
        f"  {'all':14s} n={len(every):6d}  p50 {percentile(every, 0.5) * 1e3:7.1f} ms  "
        f"p99 {percentile(every, 0.99) * 1e3:7.1f} ms  mean {statistics.fmean(every) * 1e3:.1f} ms"
    )
    lines.append(
        f"  server log: {len(stderr.splitlines())} lines, {stderr.count('Traceback')} tracebacks"
    )
    if len(ends) < 2:
        soak.failures.append("too short: fewer than two long idle gaps after the warm-up")
    for name, values in (("descriptors", fds), ("RSS", rss)):
        if len(values) >= 2 and abs(growth(values)) > FLAT:
            soak.failures.append(f"{name} grew {growth(values):+.1%} (target within {FLAT:.0%})")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=600.0, help="seconds (default 600)")
    parser.add_argument("--embedder", default="hashing", help="CPERSONA_EMBEDDING_MODE")
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--json", type=Path, help="write samples and latencies here")
    args = parser.parse_args(argv)
    soak = Soak(duration=args.duration)
    with tempfile.TemporaryDirectory(prefix="cpersona-soak-") as tmp:
        server = HttpServer(Path(tmp), {
            "CPERSONA_AUTH_TOKEN": TOKEN, "CPERSONA_EMBEDDING_MODE": args.embedder,
            "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1",
        })  # fmt: skip
        server.start()
        try:
            assert server.proc is not None
            run(server.url, server.proc.pid, soak, args.seed)
        finally:
            code = server.stop()
        stderr = server.stderr
        lost = lost_writes(server.db, soak.ledgers)
        files = {f.name: f.stat().st_size for f in Path(tmp).iterdir() if f.is_file()}
    soak.failures.extend(e for ledger in soak.ledgers for e in ledger.errors)
    soak.failures.extend(lost)
    if code != 0:
        soak.failures.append(f"server exited {code}")
    lines = report(soak, stderr)
    lines.append(f"  files at the end (bytes): {files}")
    print("\n".join(lines))
    for failure in soak.failures[:20]:
        print(f"  FAIL: {failure}")
    if args.json:
        args.json.write_text(json.dumps({
            "samples": [asdict(s) for s in soak.samples],
            "latencies_ms": {k: [round(x * 1e3, 2) for x in v] for k, v in soak.latencies.items()},
            "report": lines, "failures": soak.failures,
        }))  # fmt: skip
    return 1 if soak.failures else 0


if __name__ == "__main__":
    sys.exit(main())
