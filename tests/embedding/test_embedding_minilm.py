"""The default local model: reference similarities, truncation, batching, lazy loading."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from cpersona.embedding import EmbeddingMisconfigured, EmbeddingProvider
from cpersona.embedding.minilm import MiniLMProvider


@pytest.fixture(scope="module")
def minilm() -> Iterator[MiniLMProvider]:
    provider = MiniLMProvider(threads=1)
    yield provider
    provider.close()


def cosine(p: MiniLMProvider, a: str, b: str) -> float:
    x, y = p.embed([a, b])
    return float(x @ y)


# Published all-MiniLM-L6-v2 similarities from the sentence-transformers documentation:
# the usage page (sbert.net/docs/sentence_transformer/usage/usage.html) and the semantic
# textual similarity page (.../usage/semantic_textual_similarity.html). The int8 model is
# expected within 1e-2 of the float32 original.
REFERENCES = [
    ("The weather is lovely today.", "It's so sunny outside!", 0.6660),
    ("The weather is lovely today.", "He drove to the stadium.", 0.1046),
    ("It's so sunny outside!", "He drove to the stadium.", 0.1411),
    ("The new movie is awesome", "The new movie is so great", 0.8939),
    ("The cat sits outside", "The dog plays in the garden", 0.2838),
    ("A man is playing guitar", "A woman watches TV", -0.0327),
]


@pytest.mark.parametrize(
    "a, b, expected",
    REFERENCES,
    ids=["weather-sunny", "weather-stadium", "sunny-stadium", "movie", "cat-dog", "guitar-tv"],
)
def test_minilm_matches_published_similarities(
    minilm: MiniLMProvider, a: str, b: str, expected: float
) -> None:
    assert cosine(minilm, a, b) == pytest.approx(expected, abs=1e-2)


def test_minilm_rows_are_unit_float32(minilm: MiniLMProvider) -> None:
    assert isinstance(minilm, EmbeddingProvider)
    texts = ["hello", "", "日本語のテキストも埋め込める", "x" * 3000, "bad \ud800 surrogate"]
    out = minilm.embed(texts)
    assert out.shape == (len(texts), 384) and out.dtype == np.float32
    assert out.flags["C_CONTIGUOUS"]
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, rtol=1e-5)


def test_minilm_batch_equals_single(minilm: MiniLMProvider) -> None:
    # 45 texts of mixed length: several runs, sorted by length and padded within each run.
    texts = [
        " ".join(f"word{j} memory about topic {i}" for j in range(1 + (i * 7) % 23))
        for i in range(45)
    ]
    batch = minilm.embed(texts)
    singles = np.vstack([minilm.embed([t]) for t in texts])
    np.testing.assert_allclose(batch, singles, atol=1e-5)


def test_minilm_truncates_at_256_tokens(minilm: MiniLMProvider) -> None:
    words = ("the cat sat on the mat " * 100).split()  # one token per word
    at_150, at_300, at_400 = minilm.embed([" ".join(words[:n]) for n in (150, 300, 400)])
    # 300 and 400 words both keep the same first 254 words (+ [CLS], [SEP]) ...
    np.testing.assert_allclose(at_300, at_400, atol=1e-6)
    # ... and 150 words are not cut (the shipped tokenizer.json would cut at 128).
    assert not np.allclose(at_150, at_300, atol=1e-3)


def test_minilm_ignores_kind(minilm: MiniLMProvider) -> None:
    text = ["where did I park the car?"]
    np.testing.assert_array_equal(
        minilm.embed(text, kind="query"), minilm.embed(text, kind="passage")
    )


def test_minilm_is_lazy_and_loads_once_under_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    provider = MiniLMProvider()
    assert not provider.loaded and provider.dim() == 384
    assert provider.embed([]).shape == (0, 384)
    assert not provider.loaded  # an empty batch needs no model

    opened: list[Any] = []
    real_open = MiniLMProvider._open_session

    def counting_open(self: MiniLMProvider) -> Any:
        opened.append(self)
        return real_open(self)

    monkeypatch.setattr(MiniLMProvider, "_open_session", counting_open)
    results: list[np.ndarray] = []
    start = threading.Barrier(4)

    def work() -> None:
        start.wait()
        results.append(provider.embed(["same text"]))

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(opened) == 1 and provider.loaded
    for r in results[1:]:
        np.testing.assert_array_equal(r, results[0])

    provider.close()
    assert not provider.loaded
    np.testing.assert_array_equal(provider.embed(["same text"]), results[0])
    assert len(opened) == 2


def test_minilm_missing_model_is_misconfigured(tmp_path: Path) -> None:
    provider = MiniLMProvider(model_path=tmp_path / "missing.onnx")
    with pytest.raises(EmbeddingMisconfigured, match="could not be loaded"):
        provider.embed(["x"])
    assert not provider.loaded


def test_minilm_missing_tokenizer_is_misconfigured(tmp_path: Path) -> None:
    provider = MiniLMProvider(tokenizer_path=tmp_path / "missing.json")
    with pytest.raises(EmbeddingMisconfigured, match="could not be loaded"):
        provider.embed(["x"])
