"""Concurrency: two processes (and two threads of one process) write and scan one database at
once for a bounded number of steps. No step fails, every scan returns only rows that exist or
existed in the scanned agent's scope, and afterwards `cpersona index verify` exits 0."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from cpersona.embedding.hashing import HashingProvider
from cpersona.storage.scan_request import ScanLimits
from cpersona.vectors.search import scan
from support.commands import index_command
from vecindex_support import TABLES, Probe, check_probe, new_engine, scope

HERE = Path(__file__).parent
WORKER = HERE / "vecindex_worker.py"
OPS = 250


def initial_rows(db: Path) -> dict[str, dict[int, str]]:
    engine = new_engine(db)
    for i in range(20):
        engine.writer.store("ab"[i % 2], {"content": f"initial {i} tea"}, "", "")
    engine.writer.archive_episode("a", "initial episode", [], "", False, "", "")
    known = {
        t: {int(r[0]): r[1] for r in engine.db.query(f"SELECT id, agent_id FROM {t}")}
        for t in TABLES
    }
    engine.close()
    return known


@pytest.mark.parametrize("tiny", [False, True], ids=["default-headroom", "tiny-headroom"])
def test_two_processes_write_and_scan(tmp_path: Path, tiny: bool) -> None:
    db = tmp_path / "shared.db"
    known = initial_rows(db)
    env = {**os.environ}
    if tiny:  # grow, compact and trim the log all the time, under the other process's reads
        env |= {"VECTEST_HEADROOM": "2", "VECTEST_TRIM_EVERY": "5"}
    procs = [
        subprocess.Popen(
            [sys.executable, str(WORKER), str(db), name, str(seed), str(OPS)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for seed, name in enumerate(("left", "right"), start=1)
    ]
    # Meanwhile an operator rebuilds the files from the command line, three times.
    for _ in range(3):
        rebuild = index_command(db, "rebuild", "--kind", "vector")
        assert rebuild.returncode == 0, rebuild.stderr
    outputs = []
    for proc in procs:
        out, err = proc.communicate(timeout=240)
        assert proc.returncode == 0, err
        outputs.append([json.loads(line) for line in out.splitlines()])

    for records in outputs:
        assert records[-1].get("done"), records[-1]
        for r in records:
            if "stored" in r:
                known["memories"][r["stored"]] = r["agent"]
            elif "archived" in r:
                known["episodes"][r["archived"]] = r["agent"]
    scans = 0
    for records in outputs:
        for r in records:
            if "scan" not in r:
                continue
            scans += 1
            ids = r["ids"]
            assert len(ids) == len(set(ids)), f"a row returned twice: {r}"
            for row in ids:
                assert row in known[r["scan"]], f"{r['scan']} {row} never existed: {r}"
                assert known[r["scan"]][row] == r["agent"], f"row of another agent: {r}"
    assert scans > 50

    verify = index_command(db, "verify", "--kind", "vector")
    assert (verify.returncode, verify.stdout) == (0, "memories: OK\nepisodes: OK\n"), verify.stderr

    engine = new_engine(db)
    try:
        q = HashingProvider().embed(["tea code"])[0]
        for table in TABLES:
            for sc in (scope("a"), scope("b", "p1", "c1")):
                check_probe(
                    engine.db,
                    engine.indexes,
                    Probe(table, q, sc, 30, 200, -1.0, 50, 50),
                    exact_ref=False,
                )
    finally:
        engine.close()


def test_two_threads_share_one_engine(tmp_path: Path) -> None:
    """MCP runs sync handlers in worker threads: one Engine, writes and scans from two threads."""
    engine = new_engine(tmp_path / "m.db")
    errors: list[BaseException] = []
    emb = HashingProvider()
    q = emb.embed(["thread note"])[0]

    def work(name: str) -> None:
        try:
            mine = []
            for i in range(60):
                out = engine.writer.store(name, {"content": f"{name} thread note {i}"}, "", "")
                mine.append(out["id"])
                if i % 3 == 2:
                    assert engine.writer.delete_memory(mine.pop(0), name)["ok"]
                hits = scan(
                    engine.indexes["memories"],
                    q,
                    scope(name),
                    ScanLimits(window=1000, reach=0, threshold=-1.0, k=1000, far_k=0),
                )
                # Only this thread writes this agent's rows: its scan sees exactly them.
                assert sorted(int(x) for x in hits.near_ids) == sorted(mine)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in ("t1", "t2")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads)
    assert errors == []
    for table in TABLES:
        assert engine.indexes[table].verify() == []
    engine.close()
