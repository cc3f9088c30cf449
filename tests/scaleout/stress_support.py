"""Several cpersona server processes on ONE database, many clients, a ledger of what each was told.

Shared by the stress test (`test_stress.py`, the issue's 4 servers x 8 clients x 500 calls) and
`benches/stress.py` (larger runs). The servers are real processes: stdio ones spawned by the
official MCP client (as an MCP host spawns them), HTTP ones by `support.http_server.HttpServer`; all
of them get the same `CPERSONA_DB_PATH` (SQLite, several processes on one file) or the same
`CPERSONA_DATABASE_URL` (PostgreSQL), and each its own cache directory, as on separate hosts.

Clients. Client `c` works as agent `agent-<c % pairs>`, so two clients on different servers
share each agent and write the same msg_ids and contents on purpose. A client's calls: store
(with and without msg_id, into three projects and three channels, from a small pool of msg_ids
and contents its partner also uses), update, delete, lock / unlock, an update or delete of a
locked row (must be refused), an update of another agent's row (must be refused), and recall
with every scope combination. Only the client that got `stored` for a row changes it, so each
row has one writer and "its latest acknowledged content" is well defined.

Failover. When a server is SIGKILLed (`Cluster.kill`), a call in flight on it has no answer;
its client reconnects to another HTTP server and sends the same call again, as a client behind
a load balancer does. A resent store is answered `skipped` with the row's id when the first
attempt committed; a resent delete that finds nothing is the first attempt's success.

`check` compares the database with the ledgers: every acknowledged store / update readable
with its latest acknowledged content and lock state unless acknowledged deleted, no row nobody
was told about, no two rows a dedup rule (surface.md §5.4: the probe scopes, not only the
exact-bucket unique indexes) forbids, and every row a recall returned in the caller's scope.
"""

from __future__ import annotations

import contextlib
import json
import random
import re
import signal
import sys
import time
from collections import defaultdict
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
from child_env import inherited
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from stress_ledger import Book, DbRow, Recall, Row, Skip, check, read_rows
from support.http_server import WAIT, HttpServer, Tools, connect

__all__ = ["Book", "Cluster", "DbRow", "Recall", "Row", "Skip", "Workload", "check", "cross_reads",
           "make_lanes", "read_rows", "run_phase"]  # fmt: skip

TOKEN = "stress-token"
PROJECTS = ("", "alpha", "beta")
CHANNELS = ("", "c1", "c2")
#: Shared pools: both clients of an agent (on different servers) draw msg_ids and contents
#: from these, so the same store arrives at two processes at once.
POOL = 24
WORDS = ("river", "copper", "lantern", "orchard", "signal", "harbor", "meadow", "granite",
         "violet", "ember", "compass", "thistle")  # fmt: skip
_LOCKED = "not found, not owned by agent, or locked"
_REF = re.compile(r"^(mem|ep):(\d+)$")


# -- servers -------------------------------------------------------------------------------------


def base_env(target: str, cache: Path) -> dict[str, str]:
    """The environment every server gets: one database `target` (a PostgreSQL URL or a file
    path), its own cache directory, the hashing embedder (no model load), one BLAS thread."""
    env = inherited("LANG")
    env.update({
        "CPERSONA_EMBEDDING_MODE": "hashing", "CPERSONA_CACHE_DIR": str(cache),
        "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "CPERSONA_LOG_LEVEL": "WARNING",
    })  # fmt: skip
    if target.startswith(("postgresql://", "postgres://")):
        env["CPERSONA_DATABASE_URL"] = target
    else:
        env["CPERSONA_DB_PATH"] = target
    return env


@dataclass
class Server:
    """One server process: `kind` "stdio" (spawned by its client session) or "http"."""

    name: str
    kind: str
    env: dict[str, str]
    http: HttpServer | None = None
    tools: Tools | None = None  # the stdio session every client of this server shares
    killed: bool = False

    @property
    def url(self) -> str:
        assert self.http is not None
        return self.http.url


@dataclass
class Cluster:
    """The servers of one run; `stdio` and `http` processes on one database."""

    target: str
    workdir: Path
    servers: list[Server] = field(default_factory=list)

    @classmethod
    def make(cls, target: str, workdir: Path, stdio: int, http: int) -> Cluster:
        cluster = cls(target, workdir)
        for i in range(stdio + http):
            kind = "stdio" if i < stdio else "http"
            name = f"{kind}{i}"
            env = base_env(target, workdir / f"cache-{name}")
            server = Server(name, kind, env)
            if kind == "http":
                env.update({"CPERSONA_AUTH_TOKEN": TOKEN, "CPERSONA_HTTP_HOST": "127.0.0.1",
                            "CPERSONA_HTTP_PORT": "0"})  # fmt: skip
                server.http = HttpServer(workdir, env, name=name)
                server.http.env = env  # exactly this environment (no CPERSONA_DB_PATH default)
            cluster.servers.append(server)
        return cluster

    @property
    def http_servers(self) -> list[Server]:
        return [s for s in self.servers if s.kind == "http"]

    def start_http(self) -> None:
        for server in self.http_servers:
            assert server.http is not None
            server.http.start()

    def stop_http(self) -> dict[str, int | None]:
        """Exit codes of the HTTP servers still running (SIGTERM; a killed one reports None)."""
        codes: dict[str, int | None] = {}
        for server in self.http_servers:
            assert server.http is not None
            codes[server.name] = None if server.killed else server.http.stop()
        return codes

    def kill(self, server: Server) -> None:
        """SIGKILL an HTTP server; its clients fail over on their next call."""
        assert server.http is not None and server.http.proc is not None
        server.killed = True
        server.http.proc.send_signal(signal.SIGKILL)
        server.http.proc.wait(timeout=WAIT)

    def stderr(self) -> dict[str, str]:
        out = {}
        for server in self.http_servers:
            assert server.http is not None
            out[server.name] = server.http.stderr
        for server in self.servers:
            path = self.workdir / f"{server.name}.stderr"
            if server.kind == "stdio" and path.exists():
                out[server.name] = path.read_text(encoding="utf-8", errors="replace")
        return out

    @contextlib.asynccontextmanager
    async def stdio_sessions(self) -> AsyncIterator[None]:
        """Spawn every stdio server through the official client; one session each."""
        async with contextlib.AsyncExitStack() as stack:
            for server in self.servers:
                if server.kind != "stdio":
                    continue
                params = StdioServerParameters(
                    command=sys.executable, args=["-m", "cpersona"], env=server.env,
                    cwd=str(self.workdir),
                )  # fmt: skip
                errlog = stack.enter_context(open(self.workdir / f"{server.name}.stderr", "w"))  # noqa: SIM115
                transport = stdio_client(params, errlog=errlog)
                client = await stack.enter_async_context(Client(transport))
                server.tools = Tools(client)
            yield


Call = tuple[str, dict[str, Any]]


@dataclass
class Lane:
    """One client: its agent, its server, its rows, the call it has in flight."""

    client: int
    agent: str
    server: Server
    rng: random.Random
    tag: str
    mine: list[int] = field(default_factory=list)
    step: int = 0
    pending: Call | None = None
    resend: bool = False


def _args_scope(args: dict[str, Any]) -> tuple[str, str]:
    return args.get("project_id", ""), args.get("channel", "")


class Workload:
    """Generates a client's calls and records their answers in the shared Book."""

    def __init__(self, book: Book, *, recall_only: bool = False, store_only: bool = False) -> None:
        self.book = book
        self.recall_only = recall_only
        #: Stores only (benches/throughput.py "store": the write path's throughput).
        self.store_only = store_only

    def next_call(self, lane: Lane) -> Call:
        rng, book = lane.rng, self.book
        live = [i for i in lane.mine if not book.rows[i].deleted]
        if self.recall_only:
            return self._recall(lane)
        if self.store_only:
            return self._store(lane)
        roll = rng.random()
        if roll < 0.40 or not live:
            return self._store(lane)
        if roll < 0.55:
            target = rng.choice(live)
            text = f"{lane.tag} c{lane.client} edit {lane.step}: the {rng.choice(WORDS)} moved"
            return "update_memory", {"agent_id": lane.agent, "memory_id": target, "content": text}
        if roll < 0.63:
            return "delete_memory", {"agent_id": lane.agent, "memory_id": rng.choice(live)}
        if roll < 0.71:
            target = rng.choice(live)
            op = "unlock_memory" if book.rows[target].locked else "lock_memory"
            return op, {"agent_id": lane.agent, "memory_id": target}
        if roll < 0.74:  # another agent's row: must be refused and left unchanged
            foreign = [r.id for r in book.rows.values() if r.agent != lane.agent]
            if foreign:
                target = rng.choice(foreign)
                return "update_memory", {
                    "agent_id": lane.agent, "memory_id": target, "content": "not mine to write",
                }  # fmt: skip
        return self._recall(lane)

    def _recall(self, lane: Lane) -> Call:
        rng = lane.rng
        args: dict[str, Any] = {"agent_id": lane.agent, "query": rng.choice(WORDS), "limit": 10}
        project = rng.choice((None, "", "alpha", "beta"))
        if project is not None:
            args["project_id"] = project
        channel = rng.choice(CHANNELS)
        if channel:
            args["channel"] = channel
        return "recall", args

    def _store(self, lane: Lane) -> Call:
        rng = lane.rng
        if rng.random() < 0.35:  # a content the partner client also writes
            content = f"shared note {rng.randrange(POOL)}: the {WORDS[lane.step % len(WORDS)]}"
        else:
            content = f"{lane.tag} c{lane.client} s{lane.step}: the {rng.choice(WORDS)} waits"
        message: dict[str, Any] = {"content": content}
        kind = rng.random()
        if kind < 0.35:
            message["id"] = f"m{rng.randrange(POOL)}"  # a msg_id the partner also uses
        elif kind < 0.7:
            message["id"] = f"{lane.tag}-c{lane.client}-{lane.step}"
        args: dict[str, Any] = {"agent_id": lane.agent, "message": message}
        project, channel = rng.choice(PROJECTS), rng.choice(CHANNELS)
        if project:
            args["project_id"] = project
        if channel:
            args["channel"] = channel
        return "store", args

    def record(self, lane: Lane, op: str, args: dict[str, Any], answer: dict[str, Any]) -> None:
        book = self.book
        where = f"{lane.agent} (client {lane.client} on {lane.server.name}) {op} {args}"
        target = book.rows.get(args.get("memory_id", -1))
        if op == "store":
            self._record_store(lane, args, answer, where)
        elif op == "recall":
            self._record_recall(lane, args, answer, where)
        elif target is None or target.agent != lane.agent:  # another agent's row
            if answer != {"ok": False, "error": f"Memory {args['memory_id']} {_LOCKED}"}:
                book.errors.append(f"{where}: a foreign row was not refused: {answer}")
            book.outcomes["foreign refused"] += 1
        elif op == "update_memory":
            if target.locked:
                self._expect_refusal(target, answer, where, "update of a locked row")
            elif answer == {"ok": True, "updated_id": target.id}:
                target.content = args["content"]
                book.outcomes["updated"] += 1
            else:
                book.errors.append(f"{where}: {answer}")
        elif op == "delete_memory":
            if target.locked:
                self._expect_refusal(target, answer, where, "delete of a locked row")
            elif answer == {"ok": True, "deleted_id": target.id} or (
                lane.resend and answer.get("error", "").endswith(_LOCKED)
            ):  # a resent delete finds the row gone when the first attempt committed
                target.deleted = True
                book.outcomes["deleted"] += 1
            else:
                book.errors.append(f"{where}: {answer}")
        else:
            key = "locked_id" if op == "lock_memory" else "unlocked_id"
            if answer == {"ok": True, key: target.id}:
                target.locked = op == "lock_memory"
                book.outcomes[op.split("_")[0] + "ed"] += 1
            else:
                book.errors.append(f"{where}: {answer}")

    def _expect_refusal(self, row: Row, answer: dict[str, Any], where: str, what: str) -> None:
        if answer == {"ok": False, "error": f"Memory {row.id} {_LOCKED}"}:
            self.book.outcomes[f"{what} refused"] += 1
        else:
            self.book.errors.append(f"{where}: {what} not refused: {answer}")

    def _record_store(self, lane: Lane, args: dict[str, Any], answer: dict[str, Any], where: str):
        book, message = self.book, args["message"]
        project, channel = _args_scope(args)
        if answer.get("result") == "stored" and isinstance(answer.get("id"), int):
            if answer["id"] in book.rows:
                book.errors.append(f"{where}: id {answer['id']} was already stored: {answer}")
                return
            book.rows[answer["id"]] = Row(
                answer["id"], lane.agent, project, channel, message.get("id", ""),
                message["content"], message["content"], owner=lane.client,
            )  # fmt: skip
            lane.mine.append(answer["id"])
            book.outcomes["stored"] += 1
        elif answer.get("result") == "skipped" and answer.get("ok") is True:
            reason = answer.get("reason", "")
            book.outcomes[f"skipped: {reason}"] += 1
            if "id" in answer:
                book.skips.append(Skip(
                    lane.client, answer["id"], reason, lane.agent, project, channel,
                    message.get("id", ""), message["content"], lane.resend,
                ))  # fmt: skip
            elif reason != "duplicate (unique index)":
                book.errors.append(f"{where}: skipped without an id: {answer}")
        else:
            book.errors.append(f"{where}: {answer}")

    def _record_recall(self, lane: Lane, args: dict[str, Any], answer: dict[str, Any], where):
        messages = answer.get("messages")
        if not isinstance(messages, list):
            self.book.errors.append(f"{where}: {answer}")
            return
        ids, episodes = [], []
        for message in messages:
            found = _REF.match(message.get("ref", ""))
            if found is None:
                continue  # an injected row (the profile) carries no ref
            (ids if found.group(1) == "mem" else episodes).append(int(found.group(2)))
        self.book.recalls.append(
            Recall(lane.agent, args.get("project_id"), args.get("channel", ""), ids, episodes)
        )
        self.book.outcomes["recalled"] += 1


# -- running -------------------------------------------------------------------------------------


async def _steps(lane: Lane, work: Workload, calls: int, tools: Tools) -> None:
    """Run `lane` until it made `calls` calls; the call in flight stays in `lane.pending`."""
    book = work.book
    while lane.step < calls:
        if lane.pending is None:
            lane.pending = work.next_call(lane)
        op, args = lane.pending
        start = time.perf_counter()
        with anyio.fail_after(WAIT):
            result = await tools.raw(op, args)
        if result.is_error:
            answer = {"error": result.content[0].text if result.content else "is_error"}
        else:
            answer = json.loads(result.content[0].text)
        book.latencies[op].append(time.perf_counter() - start)
        work.record(lane, op, args, answer)
        book.acknowledged += 1
        lane.pending, lane.resend = None, False
        lane.step += 1


async def run_lane(lane: Lane, work: Workload, calls: int, cluster: Cluster) -> None:
    """One client's calls; over HTTP its own connection, failing over when its server dies."""
    if lane.server.kind == "stdio":
        assert lane.server.tools is not None
        await _steps(lane, work, calls, lane.server.tools)
        return
    while lane.step < calls:
        server = lane.server
        try:
            async with connect(server.url, TOKEN) as tools:
                await _steps(lane, work, calls, tools)
        except Exception as exc:  # only a killed server's failure is expected (re-raised otherwise)
            if not server.killed:
                raise
            alive = [s for s in cluster.http_servers if not s.killed]
            if not alive:
                raise AssertionError("no HTTP server left to fail over to") from exc
            lane.server = alive[lane.client % len(alive)]
            work.book.failovers += 1
            if lane.pending is not None:
                lane.resend = True
                work.book.resent += 1


def make_lanes(cluster: Cluster, clients: int, tag: str, seed: int, pairs: int) -> list[Lane]:
    """Clients spread evenly over the servers, partners (c, c + pairs) on different servers."""
    per = max(1, clients // len(cluster.servers))
    lanes = []
    for c in range(clients):
        server = cluster.servers[(c // per) % len(cluster.servers)]
        rng = random.Random(f"{seed}-{tag}-{c}")
        lanes.append(Lane(c, f"agent-{c % pairs}", server, rng, tag))
    return lanes


async def run_phase(
    cluster: Cluster,
    work: Workload,
    lanes: list[Lane],
    calls: int,
    kill: tuple[Server, int] | None = None,
) -> None:
    """Every lane to `calls` calls; with `kill=(server, n)` that server is SIGKILLed once the
    clients have had `n` answers in this phase."""
    book = work.book
    start = book.acknowledged

    async def killer(server: Server, after: int) -> None:
        while book.acknowledged - start < after:
            await anyio.sleep(0.01)
        await anyio.to_thread.run_sync(cluster.kill, server)

    async with anyio.create_task_group() as tg:
        if kill is not None:
            tg.start_soon(killer, *kill)
        for lane in lanes:
            tg.start_soon(run_lane, lane, work, calls, cluster)


# -- checking ------------------------------------------------------------------------------------


async def cross_reads(cluster: Cluster, book: Book, per_agent: int = 3) -> list[str]:
    """Each live server finds the newest rows every client wrote, wherever they were written:
    `list_memories` shows the row with its latest content, and a recall of that content
    returns it (the server's own full-text index caught up with the other servers' writes)."""
    problems: list[str] = []
    newest: dict[str, list[Row]] = defaultdict(list)
    for row in sorted(book.rows.values(), key=lambda r: -r.id):
        if not row.deleted and len(newest[row.agent]) < per_agent:
            newest[row.agent].append(row)
    for server in cluster.servers:
        if server.killed:
            continue
        async with contextlib.AsyncExitStack() as stack:
            tools = server.tools
            if tools is None:
                tools = await stack.enter_async_context(connect(server.url, TOKEN))
            for agent, rows in sorted(newest.items()):
                listed = await tools("list_memories", {"agent_id": agent, "limit": 500})
                seen = {m["id"]: m["content"] for m in listed["memories"]}
                for row in rows:
                    if seen.get(row.id) != row.content:
                        problems.append(f"{server.name} lists #{row.id} as {seen.get(row.id)!r}")
                    args = {"agent_id": agent, "query": row.content, "limit": 10}
                    answer = await tools("recall", args)
                    refs = [m.get("ref") for m in answer["messages"]]
                    if f"mem:{row.id}" not in refs:
                        problems.append(f"{server.name} recall of {row.content!r}: {refs}")
    return problems
