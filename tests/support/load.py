"""A mixed store / recall / update / delete workload from N concurrent HTTP clients.

Shared by the load test (`tests/http/test_http_load.py`, small) and the load benchmark
(`benches/test_http_load_bench.py`, large). Each client owns one agent and keeps a ledger of
what the server acknowledged, so the database can be checked against it afterwards: every
acknowledged write present with its last acknowledged content, every acknowledged delete gone.
"""

from __future__ import annotations

import math
import sqlite3
import time
from collections import defaultdict
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from support.http_server import connect

#: The repeating pattern of one client's calls (3 stores : 1 recall : 1 update : 1 delete).
PATTERN = ("store", "store", "recall", "update_memory", "store", "delete_memory")
WORDS = ("river", "copper", "lantern", "orchard", "signal", "harbor", "meadow", "granite",
         "violet", "ember", "compass", "thistle")  # fmt: skip


@dataclass
class Ledger:
    """What one client was told: live rows (id -> content) and deleted ids."""

    agent: str
    live: dict[int, str] = field(default_factory=dict)
    deleted: set[int] = field(default_factory=set)
    errors: list[str] = field(default_factory=list)


@dataclass
class LoadResult:
    ledgers: list[Ledger]
    latencies: dict[str, list[float]]  # tool -> seconds per call
    wall: float

    @property
    def calls(self) -> int:
        return sum(len(v) for v in self.latencies.values())

    @property
    def errors(self) -> list[str]:
        return [e for ledger in self.ledgers for e in ledger.errors]


def sentence(client: int, step: int) -> str:
    a, b, c = (WORDS[(client * 7 + step * k) % len(WORDS)] for k in (1, 3, 5))
    return f"client {client} step {step}: the {a} near the {b} keeps its {c}"


async def run_client(
    url: str,
    token: str,
    client: int,
    calls: int,
    mode: str,
    latencies: dict[str, list[float]],
    tag: str,
) -> Ledger:
    ledger = Ledger(agent=f"{tag}-{client}")
    async with connect(url, token, mode=mode) as tools:
        for step in range(calls):
            op, args = next_call(
                ledger,
                step,
                store=(f"{tag}-{client}-{step}", f"{tag}: {sentence(client, step)}"),
                query=WORDS[step % len(WORDS)],
                edit=f"{tag}: {sentence(client, step)} (edited)",
            )
            await call(tools, ledger, op, args, latencies)
    return ledger


def next_call(
    ledger: Ledger, step: int, *, store: tuple[str, str], query: str, edit: str
) -> tuple[str, dict[str, Any]]:
    """The call PATTERN makes at `step` for the ledger's agent (an update or a delete with no
    row left to change stores instead): `store` is the new message's (id, content), `query`
    the recall's, `edit` the update's new content."""
    op = PATTERN[step % len(PATTERN)]
    mine = sorted(ledger.live)
    if op in ("update_memory", "delete_memory") and not mine:
        op = "store"
    agent = ledger.agent
    if op == "store":
        return op, {"agent_id": agent, "message": {"id": store[0], "content": store[1]}}
    if op == "recall":
        return op, {"agent_id": agent, "query": query, "limit": 5}
    if op == "update_memory":
        return op, {"agent_id": agent, "memory_id": mine[step % len(mine)], "content": edit}
    return op, {"agent_id": agent, "memory_id": mine[0]}


async def call(
    tools: Any, ledger: Ledger, op: str, args: dict[str, Any], latencies: dict[str, list[float]]
) -> None:
    """One call, timed into `latencies[op]`, its answer recorded in the ledger."""
    start = time.perf_counter()
    answer = await tools(op, args)
    latencies[op].append(time.perf_counter() - start)
    _record(ledger, op, args, answer)


def _record(ledger: Ledger, op: str, args: dict, answer: dict) -> None:
    if "error" in answer or answer.get("ok") is False:
        ledger.errors.append(f"{ledger.agent} {op} {args}: {answer}")
    elif op == "store":
        if answer.get("result") != "stored":
            ledger.errors.append(f"{ledger.agent} store not stored: {answer}")
        else:
            ledger.live[answer["id"]] = args["message"]["content"]
    elif op == "update_memory":
        ledger.live[args["memory_id"]] = args["content"]
    elif op == "delete_memory":
        ledger.live.pop(args["memory_id"])
        ledger.deleted.add(args["memory_id"])
    elif "messages" not in answer:
        ledger.errors.append(f"{ledger.agent} recall answered {answer}")


def run_load(
    url: str, token: str, *, clients: int, calls: int, mode: str = "auto", tag: str = "load"
) -> LoadResult:
    """`clients` concurrent connections of `calls` calls each; agents are `<tag>-<i>`."""
    latencies: dict[str, list[float]] = defaultdict(list)
    ledgers: list[Ledger] = [Ledger("")] * clients

    async def main() -> None:
        async def one(i: int) -> None:
            ledgers[i] = await run_client(url, token, i, calls, mode, latencies, tag)

        async with anyio.create_task_group() as tg:
            for i in range(clients):
                tg.start_soon(one, i)

    start = time.perf_counter()
    anyio.run(main)
    return LoadResult(ledgers, dict(latencies), time.perf_counter() - start)


def lost_writes(db: Path, ledgers: list[Ledger]) -> list[str]:
    """Differences between the database and what the clients were told."""
    problems = []
    with closing(sqlite3.connect(db)) as conn:
        for ledger in ledgers:
            rows = dict(conn.execute(
                "SELECT id, content FROM memories WHERE agent_id = ?", (ledger.agent,)
            ).fetchall())  # fmt: skip
            for mid, content in ledger.live.items():
                if rows.get(mid) != content:
                    problems.append(
                        f"{ledger.agent} #{mid}: told {content!r}, found {rows.get(mid)!r}"
                    )
            for mid in ledger.deleted & set(rows):
                problems.append(f"{ledger.agent} #{mid}: deleted but still there")
            for mid in set(rows) - set(ledger.live):
                problems.append(f"{ledger.agent} #{mid}: a row nobody acknowledged")
    return problems


def percentile(values: list[float], q: float) -> float:
    """The q-quantile (0..1) by the nearest-rank rule."""
    ordered = sorted(values)
    rank = min(len(ordered), max(1, math.ceil(q * len(ordered))))
    return ordered[rank - 1]
