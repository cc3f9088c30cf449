"""`make_provider`: the one place that maps `Settings` to an embedding provider."""

from __future__ import annotations

from cpersona.config import Settings
from cpersona.embedding.base import EmbeddingProvider
from cpersona.embedding.cache import CachedProvider
from cpersona.errors import ConfigError


def make_provider(settings: Settings) -> CachedProvider:
    """The provider `settings.embedding_mode` names, behind the single-text cache.

    Cheap and offline: no model is loaded and no request is sent until the first embed, and a
    bad URL or key is reported by the calls (as `EmbeddingMisconfigured`), not here.

    Raises:
        ConfigError: the mode is not one of config.EMBEDDING_MODES.
    """
    inner: EmbeddingProvider
    mode = settings.embedding_provider
    # Provider modules are imported only when chosen: `none` never imports urllib, and no
    # mode imports onnxruntime before its first embed.
    if mode == "local-minilm":
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
            "one of local, local-minilm, http, api, none, hashing"
        )
    return CachedProvider(
        inner, size=settings.embedding_cache_size, ttl=settings.embedding_cache_ttl
    )
