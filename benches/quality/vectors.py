"""A provider wrapper that keeps every vector it computes on disk, keyed by model and text.

The benchmark stores thousands of texts per configuration; with this cache a rerun computes
no vector at all. Entries are keyed by a digest of (model name, kind, text), so a changed
model name or prefix rule never serves stale vectors. One `.npz` file per model under
`$CPERSONA_BENCH_CACHE` (default `~/.cache/cpersona-bench/`).
"""

from __future__ import annotations

import hashlib
import os
import re
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np


def cache_dir() -> Path:
    env = os.environ.get("CPERSONA_BENCH_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "cpersona-bench"


def _digest(name: str, kind: str, text: str) -> bytes:
    data = f"{name}\x00{kind}\x00".encode() + text.encode("utf-8", "surrogatepass")
    return hashlib.blake2b(data, digest_size=16).digest()


class DiskCachedProvider:
    """Serves `inner`'s vectors from a disk cache; computes (and remembers) only misses.

    Args:
        inner: the real provider.
        directory: where the cache file lives.
    """

    available = True

    def __init__(self, inner: Any, directory: Path | None = None) -> None:
        self.inner = inner
        self.name = inner.name
        self.computed = 0  # texts embedded by the model in this process
        slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", inner.name)
        self._path = (directory or cache_dir()) / f"{slug}.npz"
        self._rows: dict[bytes, np.ndarray] = {}
        self._dirty = False
        if self._path.exists():
            with np.load(self._path) as saved:
                for key, row in zip(saved["keys"], saved["vectors"], strict=True):
                    self._rows[bytes(key)] = row

    def dim(self) -> int | None:
        return int(self.inner.dim())

    def embed(self, texts: Sequence[str], *, kind: str = "passage") -> np.ndarray:
        texts = list(texts)
        keys = [_digest(self.name, kind, t) for t in texts]
        todo = {k: t for k, t in zip(keys, texts, strict=True) if k not in self._rows}
        missing = list(todo.items())
        if missing:
            self._compute(missing, kind)
        dim = self.dim() or 0
        out = np.empty((len(texts), dim), dtype=np.float32)
        for i, key in enumerate(keys):
            out[i] = self._rows[key]
        return out

    def prime(self, texts: Sequence[str], kind: str, *, label: str = "") -> None:
        """Compute every missing vector of `texts` in batches (fast), then save the cache."""
        todo = {}
        for t in texts:
            key = _digest(self.name, kind, t)
            if key not in self._rows:
                todo[key] = t
        if todo:
            started = time.monotonic()
            items = list(todo.items())
            for start in range(0, len(items), 256):
                self._compute(items[start : start + 256], kind)
                done = min(start + 256, len(items))
                print(
                    f"  {self.name} {label} {kind}: {done}/{len(items)} embedded "
                    f"({time.monotonic() - started:.0f}s)",
                    file=sys.stderr,
                    flush=True,
                )
            self.save()

    def _compute(self, items: list[tuple[bytes, str]], kind: str) -> None:
        vectors = self.inner.embed([t for _, t in items], kind=kind)
        for (key, _), row in zip(items, vectors, strict=True):
            self._rows[key] = np.array(row, dtype=np.float32)
        self.computed += len(items)
        self._dirty = True

    def save(self) -> None:
        if not self._dirty:
            return
        self._path.parent.mkdir(parents=True, exist_ok=True)
        keys = np.array([np.frombuffer(k, dtype=np.uint8) for k in self._rows], dtype=np.uint8)
        vectors = np.vstack(list(self._rows.values())).astype(np.float32)
        tmp = self._path.with_suffix(".tmp.npz")
        np.savez(tmp, keys=keys, vectors=vectors)
        os.replace(tmp, self._path)
        self._dirty = False

    def close(self) -> None:
        self.save()
