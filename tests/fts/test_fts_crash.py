"""Crash and concurrency: writer processes killed with SIGKILL (at random, with the file dirty
halfway through an append, halfway through a rebuild) and two writers on one database. After
each, a fresh index in this process answers as FTS5 does and `verify()` finds nothing."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cpersona.storage import open_database
from fts_support import HAS_CORE, fts_index, indexed, oracle, scope

pytestmark = pytest.mark.skipif(not HAS_CORE, reason="the full-text index needs the Rust core")

WRITER = Path(__file__).parent / "fts_writer.py"
QUERIES = ["maybe the promotion", "東京都 hiring", "when there café", "🙂🙂🙂 load decided"]


def start(db: Path, seed: int, ops: int, pause: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(WRITER.parent), *sys.path])}
    return subprocess.Popen(
        [sys.executable, str(WRITER), str(db), str(seed), str(ops), pause],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def kill_at_pause(proc: subprocess.Popen[str]) -> str:
    assert proc.stdout is not None
    seen = []
    for line in proc.stdout:
        seen.append(line)
        if line.startswith("PAUSE"):
            break
    proc.send_signal(signal.SIGKILL)
    rest, err = proc.communicate(timeout=60)
    assert any(x.startswith("PAUSE") for x in seen), (seen, err)
    return "".join(seen) + rest


def check(db_path: Path) -> None:
    db = open_database(str(db_path))
    try:
        for table in ("memories", "episodes"):
            index = fts_index(db, table)
            for q in QUERIES:
                for sc in (scope("a"), scope("b")):
                    assert indexed(index, q, sc, 20) == oracle(db, table, q, sc, 20)
            assert index.verify() == []
            index.close()
    finally:
        db.close()


def stored_ids(out: str) -> set[int]:
    return {int(x.split()[1]) for x in out.splitlines() if x.startswith("stored ")}


def test_sigkill_mid_append_and_mid_rebuild_and_at_random(tmp_path: Path) -> None:
    db = tmp_path / "crash.db"
    rng = random.Random(5)
    acked: set[int] = set()
    for seed, pause in enumerate(["mid_append", "", "mid_rebuild", "", "mid_append"]):
        if pause == "mid_rebuild":
            Path(f"{db}.memories.fts").unlink(missing_ok=True)  # the next sync rebuilds
        proc = start(db, seed, 300, pause)
        if pause:
            out = kill_at_pause(proc)
        else:
            time.sleep(rng.uniform(0.8, 2.0))
            proc.send_signal(signal.SIGKILL)
            out, _ = proc.communicate(timeout=60)
        assert "mismatch" not in out, out
        acked |= stored_ids(out)
        check(db)
    conn = open_database(str(db))
    try:
        present = {r[0] for r in conn.query("SELECT id FROM memories")}
        deleted_later = acked - present  # the writers delete random rows too
        assert len(deleted_later) < len(acked)
    finally:
        conn.close()


@pytest.mark.parametrize("ops", [120])
def test_two_writers_on_one_database(tmp_path: Path, ops: int) -> None:
    db = tmp_path / "two.db"
    open_database(str(db)).close()
    procs = [start(db, seed, ops, "") for seed in (11, 12)]
    outs = []
    for proc in procs:
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err
        outs.append(out)
    for out in outs:
        assert out.rstrip().endswith("done")
        assert "mismatch" not in out, out
    check(db)
