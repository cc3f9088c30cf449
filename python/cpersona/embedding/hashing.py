"""A deterministic, offline provider for tests: signed feature hashing of words and trigrams.

It knows no meaning, only shared surface: texts that share words (or word fragments) get
similar vectors, texts that share nothing are near-orthogonal. That is enough to exercise the
whole recall pipeline without a model or a network, and the vectors are identical in every
process and on every machine (blake2b, never Python's salted `hash()`).
"""

from __future__ import annotations

import functools
import hashlib
import re

import numpy as np

from cpersona.embedding.base import BatchEmbedder, Kind

DEFAULT_DIM = 384

_WORD = re.compile(r"\w+")
# Words carry most of the signal; trigrams make inflections ("deploy", "deployed") overlap.
_WORD_WEIGHT = 1.0
_TRIGRAM_WEIGHT = 0.5
# A text with no word characters still needs a unit vector; all such texts share this one.
_EMPTY_FEATURE = "\x00empty"


class HashingProvider(BatchEmbedder):
    """Feature-hashing embeddings of width `dim` (default 384, MiniLM's width)."""

    def __init__(self, dim: int = DEFAULT_DIM) -> None:
        if dim < 1:
            raise ValueError(f"dim must be >= 1, got {dim}")
        self._dim = dim
        self.name = f"hashing:{dim}"

    def dim(self) -> int:
        return self._dim

    def _embed_batch(self, batch: list[str], kind: Kind) -> np.ndarray:
        out = np.empty((len(batch), self._dim), dtype=np.float32)
        for i, text in enumerate(batch):
            out[i] = self._vector(text)
        return out

    def _vector(self, text: str) -> np.ndarray:
        acc = np.zeros(self._dim, dtype=np.float64)
        for feature, weight in _features(text):
            slot, sign = _slot(feature, self._dim)
            acc[slot] += sign * weight
        norm = float(np.linalg.norm(acc))
        if norm == 0.0:
            # Signed collisions cancelled every feature out (rare, short texts only).
            slot, sign = _slot(_EMPTY_FEATURE, self._dim)
            acc[slot] = sign
            norm = 1.0
        return acc / norm


def _features(text: str) -> list[tuple[str, float]]:
    features: list[tuple[str, float]] = []
    for word in _WORD.findall(text.lower()):
        features.append(("w:" + word, _WORD_WEIGHT))
        padded = f"<{word}>"
        features.extend(("t:" + padded[i : i + 3], _TRIGRAM_WEIGHT) for i in range(len(padded) - 2))
    return features or [(_EMPTY_FEATURE, 1.0)]


@functools.lru_cache(maxsize=1 << 16)
def _slot(feature: str, dim: int) -> tuple[int, float]:
    digest = hashlib.blake2b(feature.encode("utf-8", "surrogatepass"), digest_size=8).digest()
    value = int.from_bytes(digest, "little")
    # The sign bit comes from the top of the digest so it is independent of the slot.
    return value % dim, 1.0 if value >> 63 else -1.0
