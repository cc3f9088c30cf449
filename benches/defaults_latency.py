"""`store` and `recall` latency of the default configuration before and after issue 10.

    python -m benches.defaults_latency [--rounds 5] [--per-round 12]

Before: `local-minilm` + `rsf` (cpersona's default until issue 10). After: `local-e5` + `rrf`
(the default now). Each configuration gets a server (`Engine` + `build_server`, an in-memory
MCP client, an on-disk database in a temporary directory; everything a real call pays except
the pipe). The rounds alternate between the configurations so that the load of a shared
machine falls on both alike; each round stores `--per-round` LoCoMo turns and JSQuAD
paragraphs and asks as many LoCoMo and JSQuAD questions. Medians, p90 and the spread of the
per-round medians are printed in milliseconds. The first call of each server (model load) is
reported apart. Needs the bench data (`../shared/bench-data`, or CPERSONA_BENCH_DATA).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import statistics
import sys
import tempfile
import time
from typing import Any

from cpersona.config import Settings
from cpersona.engine import Engine
from cpersona.server.app import build_server
from mcp import Client

from benches.bench_support import timed_tool_call
from benches.quality import datasets

CONFIGS = {
    "before: local-minilm + rsf": {"embedding_mode": "local-minilm", "recall_mode": "rsf"},
    "after: local-e5 + rrf (default)": {},
}
#: `--hashing`: no model cost, so what is left is the code path (run it against two checkouts
#: with PYTHONPATH=<checkout>/python to compare their overhead).
HASHING = {"hashing + rrf": {"embedding_mode": "hashing", "recall_mode": "rrf"}}
KINDS = ("store LoCoMo turn", "store JSQuAD paragraph", "recall LoCoMo", "recall JSQuAD")


async def _timed(client: Client, name: str, args: dict[str, Any]) -> float:
    spent, _ = await timed_tool_call(client, name, args)
    return spent


async def main_async(args: argparse.Namespace) -> int:
    lo = datasets.locomo(conversations=1)
    js = datasets.jsquad(questions=400, article_step=3)
    n = args.rounds * args.per_round
    work = {
        "store LoCoMo turn": [d.content for d in lo.docs[:n]],
        "store JSQuAD paragraph": [d.content for d in js.docs[:n]],
        "recall LoCoMo": [q.text for q in lo.queries[:n]],
        "recall JSQuAD": [q.text for q in js.queries[:n]],
    }
    configs = HASHING if args.hashing else CONFIGS
    timings: dict[str, dict[str, list[float]]] = {c: {k: [] for k in KINDS} for c in configs}
    round_medians: dict[str, dict[str, list[float]]] = {c: {k: [] for k in KINDS} for c in configs}
    first: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="cpersona-defaults-") as tmp:
        engines: dict[str, Engine] = {}
        clients = {}
        stack = contextlib.AsyncExitStack()
        for i, (label, overrides) in enumerate(configs.items()):
            base = Settings.from_env({})
            settings = dataclasses.replace(base, db_path=f"{tmp}/{i}.db", **overrides)
            engines[label] = Engine(settings)
            clients[label] = await stack.enter_async_context(Client(build_server(engines[label])))
            first[label] = await _timed(
                clients[label], "store", {"agent_id": "w", "message": {"content": "warm up"}}
            )
        try:
            for r in range(args.rounds):
                part = slice(r * args.per_round, (r + 1) * args.per_round)
                for label in configs if r % 2 == 0 else reversed(configs):
                    client = clients[label]
                    for kind in KINDS:
                        spent = []
                        for text in work[kind][part]:
                            if kind.startswith("store"):
                                call = ("store", {"agent_id": "a", "message": {"content": text}})
                            else:
                                call = ("recall", {"agent_id": "a", "query": text, "limit": 10})
                            spent.append(await _timed(client, *call))
                        timings[label][kind] += spent
                        round_medians[label][kind].append(statistics.median(spent))
        finally:
            await stack.aclose()
            for engine in engines.values():
                engine.close()
    print(f"{args.rounds} alternating rounds of {args.per_round} calls per kind; ms")
    print()
    print("| configuration | call | median | p90 | per-round medians (min-max) |")
    print("|---|---|---|---|---|")
    for label in configs:
        for kind in KINDS:
            xs = timings[label][kind]
            rm = round_medians[label][kind]
            p90 = statistics.quantiles(xs, n=10)[-1]
            print(
                f"| {label} | {kind} | {statistics.median(xs):.1f} | {p90:.1f} | "
                f"{min(rm):.1f}-{max(rm):.1f} |"
            )
    print()
    for label, ms in first.items():
        print(f"first store of {label} (loads the model): {ms:.0f} ms")
    return 0


def routing_cost() -> int:
    """CPU microseconds of what issue 10 added to every call: reading the vector-model record
    (every recall and write) and claiming the table inside a write transaction."""
    from cpersona.embedding.hashing import HashingProvider
    from cpersona.storage import vector_models

    def per_call(fn: Any, n: int) -> tuple[float, float]:
        runs = []
        for _ in range(5):
            started = time.process_time()
            for _ in range(n):
                fn()
            runs.append((time.process_time() - started) / n * 1e6)
        return min(runs), statistics.median(runs)

    with tempfile.TemporaryDirectory(prefix="cpersona-routing-") as tmp:
        engine = Engine(
            Settings(db_path=f"{tmp}/r.db", embedding_mode="hashing"), embedder=HashingProvider()
        )
        try:
            engine.writer.store("a", {"content": "hello"}, "", "")

            def claim() -> None:
                with engine.db.atomic() as conn:
                    vector_models.claim(conn, "memories", "hashing:384", 384)

            def empty() -> None:
                with engine.db.atomic():
                    pass

            rows = {
                "routes (record read, per recall and write)": per_call(engine.router.routes, 3000),
                "write transaction with claim": per_call(claim, 1000),
                "empty write transaction": per_call(empty, 1000),
            }
        finally:
            engine.close()
    print("| step | CPU us min | median of 5 |")
    print("|---|---|---|")
    for name, (low, mid) in rows.items():
        print(f"| {name} | {low:.1f} | {mid:.1f} |")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benches.defaults_latency", description=__doc__)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--per-round", type=int, default=10)
    parser.add_argument("--hashing", action="store_true", help="the hashing model only")
    parser.add_argument(
        "--routing", action="store_true", help="CPU cost of the per-call model record steps"
    )
    args = parser.parse_args(argv)
    if args.routing:
        return routing_cost()
    return asyncio.run(main_async(args))


if __name__ == "__main__":
    sys.exit(main())
