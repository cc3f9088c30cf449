"""An LRU + TTL cache of single-text embeddings in front of any provider.

Recall embeds one query per call and agents repeat queries, so a small cache saves a model run
or a network round trip (spec surface.md §12.3: 256 entries, 300 s). Batches are write-path
bulk work (the re-embed repair) and bypass it. `embed_one` also says whether the answer came
from the cache: only a call that reached the backend may mark recall's health state
`healthy` (§12.5).
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence

import numpy as np

from cpersona.embedding.base import EmbeddingProvider, Kind, check_texts


class CachedProvider:
    """Wraps `inner`; single-text calls go through the cache. Safe to share between threads.

    Args:
        inner: the provider that computes misses.
        size: most entries kept; 0 turns the cache off.
        ttl: seconds an entry stays valid; 0 turns the cache off.
        clock: monotonic seconds (tests pass a fake one).
    """

    def __init__(
        self,
        inner: EmbeddingProvider,
        *,
        size: int,
        ttl: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.inner = inner
        self.name = inner.name
        self.available = inner.available
        self._size = size
        self._ttl = ttl
        self._clock = clock
        self._entries: OrderedDict[bytes, tuple[np.ndarray, float]] = OrderedDict()
        self._lock = threading.Lock()

    def dim(self) -> int | None:
        return self.inner.dim()

    def embed(self, texts: Sequence[str], *, kind: Kind = "passage") -> np.ndarray:
        """As `EmbeddingProvider.embed`; a single text is served from the cache when it can."""
        batch = check_texts(texts)
        if len(batch) == 1:
            vector, _ = self.embed_one(batch[0], kind)
            return vector[np.newaxis, :]
        return self.inner.embed(batch, kind=kind)

    def embed_one(self, text: str, kind: Kind = "passage") -> tuple[np.ndarray, bool]:
        """Embed one text.

        Returns:
            ((dim,) float32 L2-normalised vector, True if it came from the cache). The vector
            is the caller's own copy.

        Raises:
            EmbeddingUnavailable: from the inner provider on a miss; failures are not cached.
        """
        if self._size <= 0 or self._ttl <= 0:
            return self.inner.embed([text], kind=kind)[0], False
        key = _key(kind, text)
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                vector, expires = entry
                if self._clock() < expires:
                    self._entries.move_to_end(key)
                    return vector.copy(), True
                del self._entries[key]
        # The backend call runs outside the lock so one slow request doesn't stall every
        # other thread; two threads missing the same text both compute it, which is harmless.
        vector = np.array(self.inner.embed([text], kind=kind)[0], dtype=np.float32)
        with self._lock:
            self._entries[key] = (vector, self._clock() + self._ttl)
            self._entries.move_to_end(key)
            while len(self._entries) > self._size:
                self._entries.popitem(last=False)
        return vector.copy(), False

    def clear(self) -> None:
        """Forget every cached vector."""
        with self._lock:
            self._entries.clear()

    def close(self) -> None:
        self.clear()
        self.inner.close()


def _key(kind: str, text: str) -> bytes:
    # A digest rather than the text itself keeps long memories out of the cache's keys;
    # "surrogatepass" because MCP strings may carry lone surrogates that strict UTF-8 refuses.
    data = kind.encode("ascii") + b"\x00" + text.encode("utf-8", "surrogatepass")
    return hashlib.blake2b(data, digest_size=16).digest()
