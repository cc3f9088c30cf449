"""Crash: a writer process killed with SIGKILL at random points and at chosen ones (between
the SQLite commit and the index update, mid-sync with the file dirty, before a grow, halfway
through a rebuild). A fresh reader process then gets `scan` == `scan_sqlite`, `verify()` finds
nothing, and every acknowledged store is present."""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from support.backends import load_kernels
from vecindex_support import header_field, new_engine

HERE = Path(__file__).parent
WRITER = HERE / "vecindex_writer.py"
READER = HERE / "vecindex_reader.py"

# (pause point or "random", headroom): the chosen points first, then random kills.
PLAN = [
    ("after_commit", ""),
    ("mid_apply", ""),
    ("mid_grow", "1"),
    ("mid_rebuild", ""),
    ("random", "1"),
    ("after_commit", "1"),
    ("random", ""),
    ("mid_apply", "1"),
    ("random", "2"),
]


class Acks:
    """What the writers acknowledged, over every run on the database."""

    def __init__(self) -> None:
        self.stored: set[int] = set()
        self.attempted_delete: set[int] = set()
        self.deleted: set[int] = set()
        self.archived: set[int] = set()

    def read(self, text: str) -> list[str]:
        markers = []
        for line in text.splitlines():
            word, _, arg = line.partition(" ")
            if word == "stored":
                self.stored.add(int(arg))
            elif word == "deleting":
                self.attempted_delete.add(int(arg))
            elif word == "deleted":
                self.deleted.add(int(arg))
            elif word == "archived":
                self.archived.add(int(arg))
            elif word in ("PAUSE", "done"):
                markers.append(line)
        return markers


def run_writer(db: Path, seed: int, pause: str, headroom: str, rng: random.Random) -> str:
    """Starts a writer, kills it at its pause point (or after a random number of acknowledged
    lines); all it printed."""
    env = {
        **os.environ,
        "VECTEST_PAUSE": "" if pause == "random" else pause,
        # the first time for a rebuild (a writer rebuilds once), else a random later write
        "VECTEST_PAUSE_AT": str(1 if pause in ("mid_rebuild", "mid_grow") else rng.randint(1, 40)),
        "VECTEST_HEADROOM": headroom,
    }
    seen: list[str] = []
    with subprocess.Popen(
        [sys.executable, str(WRITER), str(db), str(seed), "400"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as proc:  # closes the pipes and reaps the process however we leave
        assert proc.stdout is not None and proc.stderr is not None
        try:
            # A random kill lands somewhere in the write after the n-th acknowledged line.
            lines = rng.randint(1, 150) if pause == "random" else None
            for line in proc.stdout:  # bounded: the writer does at most 400 steps
                seen.append(line)
                if line.startswith("PAUSE") or len(seen) == lines:
                    break
            if lines is not None:
                time.sleep(rng.uniform(0, 0.02))
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=60)
        # Through the same buffered reader the loop used (communicate() would read the raw
        # pipe and miss lines already buffered); the process is gone, so both reads end.
        rest = proc.stdout.read()
        err = proc.stderr.read()
    assert proc.returncode in (-signal.SIGKILL, 0), err
    return "".join(seen) + rest


def crash_state(db: Path) -> dict[str, object]:
    """What the kill left behind: the log's head, each file's applied_seq and dirty flag."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        log_seq = conn.execute("SELECT COALESCE(MAX(seq), 0) FROM vector_log").fetchone()[0]
    finally:
        conn.close()
    files = {}
    for table in ("memories", "episodes"):
        path = Path(f"{db}.{table}.vec")
        if path.exists() and path.stat().st_size >= 128:
            files[table] = (header_field(path, 32, 8), header_field(path, 60, 4))
    tmps = sorted(
        p.name for p in db.parent.iterdir() if ".tmp" in p.name or p.name.endswith(".grow")
    )
    return {"log_seq": log_seq, "files": files, "tmp": tmps}


def read_back(db: Path, seed: int, kernel: str) -> dict[str, object]:
    env = {**os.environ, "CPERSONA_KERNEL": kernel}
    r = subprocess.run(
        [sys.executable, str(READER), str(db), str(seed)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.splitlines()[-1])


def test_kill_at_random_and_chosen_points(tmp_path: Path) -> None:
    db = tmp_path / "crash.db"
    engine = new_engine(db)  # create the schema once, with a few rows
    for i in range(5):
        engine.writer.store("a", {"content": f"seed row {i}"}, "", "")
    engine.close()
    acks = Acks()
    rng = random.Random(20240611)
    for seed, (pause, headroom) in enumerate(PLAN, start=1):
        if pause in ("mid_rebuild", "mid_grow"):
            # The writer's first sync rebuilds it (with its own headroom: a grow comes soon).
            Path(f"{db}.memories.vec").unlink()
        out = run_writer(db, seed, pause, headroom, rng)
        markers = acks.read(out)
        state = crash_state(db)
        if pause != "random":
            assert f"PAUSE {pause}" in markers, (pause, out[-500:])
        if pause == "after_commit":
            # committed and logged, not applied: the next reader must apply it
            assert any(applied < state["log_seq"] for applied, _ in state["files"].values()), state
        elif pause in ("mid_apply", "mid_grow"):
            assert any(dirty for _, dirty in state["files"].values()), state
        elif pause == "mid_rebuild":
            assert "memories" not in state["files"] and state["tmp"], state

        kernel = ("rust", "numpy")[seed % 2]
        load_kernels(kernel)  # the Rust case skips without the extension (fails in CI)
        result = read_back(db, seed, kernel)
        assert result["kernel"] == kernel
        assert result["checked"] == 12
        assert result["problems"] == [], (pause, state, result["problems"])
        memories = set(result["ids"]["memories"])
        missing = (acks.stored - acks.attempted_delete) - memories
        assert not missing, f"acknowledged stores lost after a kill at {pause}: {missing}"
        assert not acks.deleted & memories, "an acknowledged delete came back"
        assert acks.archived <= set(result["ids"]["episodes"])
        leftovers = [
            p.name for p in tmp_path.iterdir() if ".tmp" in p.name or p.name.endswith(".grow")
        ]
        assert leftovers == [], f"temporary index files left behind: {leftovers}"
    assert len(acks.stored) > 20
