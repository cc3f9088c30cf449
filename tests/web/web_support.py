"""A real `cpersona web` process over a database the test fills, on a loopback port."""

from __future__ import annotations

import re
import sqlite3
import sys
from contextlib import closing
from pathlib import Path

from cpersona.config import Settings
from cpersona.embedding.hashing import HashingProvider
from cpersona.engine import Engine
from support.http_server import HttpServer

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


class WebServer(HttpServer):
    """`cpersona web` over a database the test filled; `start(*args)` passes its arguments."""

    url_pattern = re.compile(r"^  url: (http://127\.0\.0\.1:\d+/)$", re.MULTILINE)

    def __init__(self, db: Path, env: dict[str, str] | None = None) -> None:
        web = {"CPERSONA_DB_PATH": str(db), "CPERSONA_WEB_PORT": "0", **(env or {})}
        super().__init__(db.parent, web, name=f"{db.stem}.web")
        self.db = db
        self.args: tuple[str, ...] = ()

    def argv(self) -> list[str]:
        return [sys.executable, "-m", "cpersona", "web", *self.args]

    def start(self, *args: str) -> str:
        self.args = args
        return super().start()
