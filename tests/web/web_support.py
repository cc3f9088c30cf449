"""A real `cpersona web` process over a database the test fills, on a loopback port."""

from __future__ import annotations

import re
import signal
import sqlite3
import subprocess
import sys
import time
from contextlib import closing
from pathlib import Path

from child_env import inherited
from cpersona.config import Settings
from cpersona.embedding.hashing import HashingProvider
from cpersona.engine import Engine

WAIT = 30.0
_URL = re.compile(r"^  url: (http://127\.0\.0\.1:\d+/)$", re.MULTILINE)
NOTES = 120  # alice's English notes: three pages of 50


def fill(db: Path) -> None:
    """alice: 120 English notes (one with markup), one Japanese note, an episode, a profile;
    bob: one Japanese note. Stored through the real write path."""
    engine = Engine(Settings(db_path=str(db), embedding_mode="hashing"), embedder=HashingProvider())
    try:
        w = engine.writer
        for i in range(NOTES):
            w.store("alice", {"content": f"note {i}: the quarterly report is due"}, "", "")
        w.store("alice", {"content": "<b>bold</b> & <script>alert(1)</script>"}, "", "")
        w.store("alice", {"content": "会議は火曜日の午後三時に変更されました"}, "", "")
        w.store("bob", {"content": "東京の天気は晴れです"}, "", "")
        w.archive_episode("alice", "planning the release", [], "release,plan", False, "", "")
        w.update_profile("alice", "Prefers short answers. 日本語も話す。")
    finally:
        engine.close()


def fingerprint(db: Path) -> list[tuple[object, ...]]:
    """Every row a write could touch, recall bookkeeping included."""
    with closing(sqlite3.connect(db)) as conn:
        rows = conn.execute(
            "SELECT id, agent_id, content, recall_count, last_recalled_at, locked FROM memories"
        ).fetchall()
        rows += conn.execute("SELECT id, summary FROM episodes").fetchall()
        rows += conn.execute("SELECT agent_id, content FROM profiles").fetchall()
    return sorted(rows, key=repr)


class WebServer:
    def __init__(self, db: Path, env: dict[str, str] | None = None) -> None:
        base = inherited()
        self.env = {
            **base,
            "CPERSONA_DB_PATH": str(db),
            "CPERSONA_EMBEDDING_MODE": "hashing",
            "CPERSONA_WEB_PORT": "0",
            **(env or {}),
        }
        self.stderr_path = db.with_suffix(".web.stderr")
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = ""

    def start(self, *args: str) -> str:
        with open(self.stderr_path, "wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "cpersona", "web", *args],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=err,
                env=self.env,
            )
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline:
            found = _URL.search(self.stderr)
            if found:
                self.url = found.group(1)
                return self.url
            if self.proc.poll() is not None:
                raise AssertionError(f"web exited {self.proc.returncode}:\n{self.stderr}")
            time.sleep(0.05)
        self.stop()
        raise AssertionError(f"no URL within {WAIT}s:\n{self.stderr}")

    @property
    def stderr(self) -> str:
        return self.stderr_path.read_text(encoding="utf-8", errors="replace")

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=WAIT)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=WAIT)
