"""CPersona 2.5.12 beside cpersona (issue 33 item 1): its wheel, a database of its schema
filled with the natural-vocabulary corpus, and an HTTP embedding server both can use.

- `legacy_python()`: a virtual environment under the bench cache with ``pip install
  cpersona==2.5.12`` (its own dependencies: the MCP SDK below 2), made on first use.
- `legacy_corpus(rows)`: a database created by 2.5.12 itself (its schema and migrations, run
  by its own `init_db`), filled with `million_corpus`'s rows (the same texts and 384-d hashing
  vectors as the `benches.million` corpora), no cpersona table or index file: what a user
  switching from 2.5.12 brings. Cached beside those corpora.
- `EmbeddingServer`: ``POST / {"texts": [...]} -> {"embeddings": [...]}`` (the wire both
  servers' `http` embedding mode speak) answering with cpersona's hashing embedder, so both
  embed a query the same way and at the same cost (one local HTTP round trip).
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from cpersona.embedding.hashing import HashingProvider

from benches import million_corpus as mc

VERSION = "2.5.12"
#: Bump when the legacy corpus changes: cached files of another version are rebuilt.
LEGACY_CORPUS_VERSION = 1


def legacy_python() -> Path:
    """The interpreter of a virtual environment holding CPersona 2.5.12 and its own
    dependencies (it needs the MCP SDK below 2; cpersona's environment has 2.x), made with
    ``python -m venv`` and ``pip install cpersona==2.5.12`` on first use."""
    venv = mc.cache_dir().parent / f"venv-{VERSION}"
    python = venv / "bin" / "python"
    probe = [str(python), "-c", f"import cpersona; assert cpersona.__version__ == {VERSION!r}"]
    if python.exists() and subprocess.run(probe, capture_output=True).returncode == 0:
        return python
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "-q", f"cpersona=={VERSION}"], check=True)
    return python


def legacy_env(db_path: Path, embed_url: str) -> dict[str, str]:
    """The environment of a 2.5.12 server on `db_path` embedding through `embed_url`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CPERSONA_", "PYTHON"))}
    env.update(
        CPERSONA_DB_PATH=str(db_path),
        CPERSONA_EMBEDDING_MODE="http",
        CPERSONA_EMBEDDING_URL=embed_url,
        CPERSONA_UPDATE_CHECK="false",
        CPERSONA_AUTO_CALIBRATE="false",
    )
    return env


def legacy_corpus(rows: int, log: Any = print) -> Path:
    """The cached 2.5.12 database of `rows` natural-vocabulary memories (built on first use)."""
    directory = mc.cache_dir()
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"legacy{VERSION}-natural-{rows}-v{LEGACY_CORPUS_VERSION}.db"
    stamp = path.with_name(path.name + ".json")
    if stamp.exists() and path.exists():
        return path
    for stale in (path, *path.parent.glob(path.name + "-*")):
        stale.unlink(missing_ok=True)
    log(f"building {path} ({rows:,} rows, schema by CPersona {VERSION})")
    env = legacy_env(path, "http://127.0.0.1:9/")
    script = (
        "import asyncio\nfrom cpersona import database as d\n"
        "async def main():\n    await d.init_db()\n    await d.close_db()\n"
        "asyncio.run(main())"
    )
    subprocess.run([str(legacy_python()), "-c", script], env=env, check=True)
    inserted = mc._insert(path, rows, mc.Vocabulary(), log)
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    stamp.write_text(json.dumps({"rows": rows, "insert_s": round(inserted, 1)}))
    return path


class _Handler(BaseHTTPRequestHandler):
    provider = HashingProvider(mc.DIM)

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        vectors = self.provider.embed(list(body["texts"]))
        answer = json.dumps({"embeddings": vectors.tolist()}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, format: str, *args: Any) -> None:
        return


class EmbeddingServer:
    """The hashing embedder over HTTP on a free local port, in a thread of this process."""

    def __init__(self) -> None:
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/embed"

    def __enter__(self) -> EmbeddingServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


if __name__ == "__main__":  # build the corpus ahead: python -m benches.legacy_support 100000
    print(legacy_corpus(int(sys.argv[1]) if len(sys.argv) > 1 else 100_000))
