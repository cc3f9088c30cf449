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
import dataclasses
import json
import statistics
import sys
import tempfile
import time
from typing import Any

from cpersona.config import Settings
from cpersona.engine import Engine
from cpersona.server.app import build_server
from mcp import Client

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
    started = time.perf_counter()
    result = await client.call_tool(name, args)
    spent = (time.perf_counter() - started) * 1000
    payload = json.loads(result.content[0].text)
    if result.is_error or ("result" not in payload and "messages" not in payload):
        raise RuntimeError(f"{name} failed: {payload}")
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
        engines = {}
        clients = {}
        for i, (label, overrides) in enumerate(configs.items()):
            base = Settings.from_env({})
            settings = dataclasses.replace(base, db_path=f"{tmp}/{i}.db", **overrides)
            engines[label] = Engine(settings)
            clients[label] = Client(build_server(engines[label]))
            await clients[label].__aenter__()
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
            for label in configs:
                await clients[label].__aexit__(None, None, None)
                engines[label].close()
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benches.defaults_latency", description=__doc__)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--per-round", type=int, default=10)
    parser.add_argument("--hashing", action="store_true", help="the hashing model only")
    return asyncio.run(main_async(parser.parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
