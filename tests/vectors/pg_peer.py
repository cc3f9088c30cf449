"""A second cpersona server process on a PostgreSQL database, for test_pg_two_servers.py: an
Engine with `ConceptEmbedder` behind an in-memory MCP client, one tool call per stdin line
(`[name, arguments]`), one answer per stdout line (`{"error": bool, "text": str}`).

    python tests/vectors/pg_peer.py DATABASE_URL CACHE_DIR
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Sequence

import numpy as np
from cpersona.config import Settings
from cpersona.embedding.base import check_texts, empty

DIM = 8
#: Texts with one of these words embed near that concept's axis; nothing else is shared, so a
#: paraphrase ("feline" for "kitten") is found by its vector only.
CONCEPTS = {0: ("kitten", "feline"), 1: ("invoice", "billing"), 2: ("harbor", "port")}


class ConceptEmbedder:
    available = True
    name = "concepts:8"

    def dim(self) -> int:
        return DIM

    def embed(self, texts: Sequence[str], *, kind: str = "passage") -> np.ndarray:
        batch = check_texts(texts)
        if not batch:
            return empty(DIM)
        out = np.zeros((len(batch), DIM), dtype=np.float32)
        for row, text in enumerate(batch):
            words = {w.strip(".,?") for w in text.lower().split()}
            out[row, 7] = 0.2
            for axis, names in CONCEPTS.items():
                if words & set(names):
                    out[row, axis] = 1.0
            out[row] /= np.linalg.norm(out[row])
        return out

    def close(self) -> None:
        pass


def settings(url: str, cache_dir: str) -> Settings:
    return Settings(
        db_path="", embedding_mode="hashing", database_url=url, cache_dir=cache_dir,
        recall_mode="rrf",
    )  # fmt: skip


async def main(url: str, cache_dir: str) -> None:
    from cpersona.engine import Engine
    from cpersona.server.app import build_server
    from mcp import Client

    engine = Engine(settings(url, cache_dir), embedder=ConceptEmbedder())
    try:
        async with Client(build_server(engine), raise_exceptions=True) as client:
            print(json.dumps({"ready": engine.db.capabilities.vector_arm}), flush=True)
            for line in sys.stdin:
                name, args = json.loads(line)
                result = await client.call_tool(name, args)
                text = result.content[0].text  # type: ignore[union-attr]
                print(json.dumps({"error": result.is_error, "text": text}), flush=True)
    finally:
        engine.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
