"""A writer for the backup tests: `python backup_writer.py DB NAME`.

Stores memories into the shared database through the server's own write path until killed or
until its stdin closes, printing one JSON line per acknowledged store, after the commit:

    {"acked": "<msg id>", "id": <row id>, "content": "<content>"}

Any exception ends the process with a traceback and a non-zero exit code.
"""

from __future__ import annotations

import json
import sys
import threading

from cpersona.config import Settings
from cpersona.embedding.hashing import HashingProvider
from cpersona.engine import Engine


def main() -> None:
    db, name = sys.argv[1], sys.argv[2]
    settings = Settings(
        db_path=db, embedding_mode="hashing", operating_context_path=db + ".no-oc.toml"
    )
    engine = Engine(settings, embedder=HashingProvider())
    stop = threading.Event()
    # The test ends a writer it keeps by closing stdin (the other one is SIGKILLed).
    threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
    i = 0
    try:
        while not stop.is_set():
            msg_id = f"{name}-{i}"
            content = f"{name} wrote note {i}:" + " tea and maps" * 20
            out = engine.writer.store("agent", {"id": msg_id, "content": content}, "", "")
            if out.get("result") != "stored":
                raise AssertionError(f"not stored: {out}")
            print(json.dumps({"acked": msg_id, "id": out["id"], "content": content}), flush=True)
            i += 1
    finally:
        engine.close()


if __name__ == "__main__":
    main()
