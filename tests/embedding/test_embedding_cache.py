"""CachedProvider: hits, misses, TTL, LRU eviction, batch bypass, failures, threads."""

from __future__ import annotations

import threading
from collections.abc import Sequence

import numpy as np
import pytest
from cpersona.embedding import CachedProvider, EmbeddingProvider, Kind
from cpersona.embedding.hashing import HashingProvider
from cpersona.errors import EmbeddingUnavailable


class Counting:
    """A hashing provider that counts the texts it was asked for and can be made to fail."""

    name = "counting"
    available = True

    def __init__(self) -> None:
        self.inner = HashingProvider(dim=16)
        self.calls: list[tuple[list[str], str]] = []
        self.failing = False
        self.closed = False
        self._lock = threading.Lock()

    def dim(self) -> int:
        return 16

    def embed(self, texts: Sequence[str], *, kind: Kind = "passage") -> np.ndarray:
        with self._lock:
            self.calls.append((list(texts), kind))
        if self.failing:
            raise EmbeddingUnavailable("backend down")
        out = self.inner.embed(texts)
        if kind == "query":
            out = -out  # so a key that ignored `kind` would be caught
        return out

    def close(self) -> None:
        self.closed = True


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def cached(size: int = 4, ttl: float = 60) -> tuple[CachedProvider, Counting, Clock]:
    inner, clock = Counting(), Clock()
    return CachedProvider(inner, size=size, ttl=ttl, clock=clock), inner, clock


def test_cache_second_call_is_a_hit() -> None:
    cache, inner, _ = cached()
    first, hit1 = cache.embed_one("hello")
    second, hit2 = cache.embed_one("hello")
    assert (hit1, hit2) == (False, True)
    assert len(inner.calls) == 1
    np.testing.assert_array_equal(first, second)
    assert first.shape == (16,) and first.dtype == np.float32


def test_cache_is_a_provider_with_the_inner_identity() -> None:
    cache, inner, _ = cached()
    assert isinstance(cache, EmbeddingProvider)
    assert (cache.name, cache.available, cache.dim()) == ("counting", True, 16)
    assert cache.inner is inner


def test_cache_key_includes_kind() -> None:
    cache, inner, _ = cached()
    passage, _ = cache.embed_one("hello", "passage")
    query, hit = cache.embed_one("hello", "query")
    assert not hit
    np.testing.assert_array_equal(query, -passage)
    assert [kind for _, kind in inner.calls] == ["passage", "query"]


def test_cache_returns_copies() -> None:
    cache, _, _ = cached()
    first, _ = cache.embed_one("hello")
    first[:] = 0.0
    again, hit = cache.embed_one("hello")
    assert hit and np.linalg.norm(again) == pytest.approx(1.0)


def test_cache_entry_expires_after_ttl() -> None:
    cache, inner, clock = cached(ttl=300)
    cache.embed_one("hello")
    clock.now += 299.9
    assert cache.embed_one("hello")[1]
    clock.now += 0.2  # 300.1 s after it was stored: a hit does not extend the lifetime
    assert not cache.embed_one("hello")[1]
    assert len(inner.calls) == 2
    assert cache.embed_one("hello")[1]


def test_cache_evicts_least_recently_used() -> None:
    cache, inner, _ = cached(size=2)
    cache.embed_one("a")
    cache.embed_one("b")
    cache.embed_one("a")  # now b is the least recently used
    cache.embed_one("c")
    assert cache.embed_one("a")[1]
    assert cache.embed_one("c")[1]
    assert not cache.embed_one("b")[1]
    assert [texts for texts, _ in inner.calls] == [["a"], ["b"], ["c"], ["b"]]


@pytest.mark.parametrize("size, ttl", [(0, 300), (256, 0)])
def test_cache_disabled_by_zero_size_or_ttl(size: int, ttl: float) -> None:
    cache, inner, _ = cached(size=size, ttl=ttl)
    assert not cache.embed_one("a")[1]
    assert not cache.embed_one("a")[1]
    assert len(inner.calls) == 2


def test_cache_single_text_embed_uses_the_cache() -> None:
    cache, inner, _ = cached()
    one = cache.embed(["hello"], kind="query")
    assert one.shape == (1, 16) and one.flags["C_CONTIGUOUS"]
    assert cache.embed_one("hello", "query")[1]
    assert len(inner.calls) == 1


def test_cache_batches_bypass_it() -> None:
    cache, inner, _ = cached()
    out = cache.embed(["a", "b"])
    assert out.shape == (2, 16)
    assert not cache.embed_one("a")[1]  # the batch stored nothing
    cache.embed(["a", "b"])
    assert [texts for texts, _ in inner.calls] == [["a", "b"], ["a"], ["a", "b"]]
    assert cache.embed([]).shape == (0, 16)


def test_cache_does_not_store_failures() -> None:
    cache, inner, _ = cached()
    inner.failing = True
    with pytest.raises(EmbeddingUnavailable, match="backend down"):
        cache.embed_one("hello")
    inner.failing = False
    assert not cache.embed_one("hello")[1]
    assert cache.embed_one("hello")[1]


def test_cache_keeps_texts_apart() -> None:
    cache, _, _ = cached(size=8)
    texts = ["a", "a ", "A", "", "\ud800", "é", "e\u0301"]
    vectors = [cache.embed_one(t)[0] for t in texts]
    for text, vector in zip(texts, vectors, strict=True):
        again, hit = cache.embed_one(text)
        assert hit
        np.testing.assert_array_equal(again, vector)


def test_cache_clear_and_close() -> None:
    cache, inner, _ = cached()
    cache.embed_one("a")
    cache.clear()
    assert not cache.embed_one("a")[1]
    cache.close()
    assert inner.closed
    assert not cache.embed_one("a")[1]


def test_cache_is_consistent_under_threads() -> None:
    cache, _, _ = cached(size=8)
    texts = [f"text {i}" for i in range(12)]  # more texts than entries: eviction under load
    expected = {t: HashingProvider(dim=16).embed([t])[0] for t in texts}
    errors: list[str] = []
    start = threading.Barrier(8)

    def work(seed: int) -> None:
        start.wait()
        for step in range(300):
            text = texts[(seed * 7 + step) % len(texts)]
            vector, _ = cache.embed_one(text)
            if not np.array_equal(vector, expected[text]):
                errors.append(text)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(cache._entries) <= 8
