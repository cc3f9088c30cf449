"""Embedding providers: texts in, L2-normalised float32 rows out.

`make_provider(settings)` picks one (spec surface.md §12): `local-e5` (the default;
multilingual-e5-small, in-process and offline; reads Japanese), `local-minilm` (in-process and
offline; English only; the default where e5's package has no wheel), `http` (the CPersona
embedding contract), `api` (OpenAI-compatible), `hashing` (deterministic, for tests) or
`none`. Every failure is an `EmbeddingUnavailable`; `EmbeddingMisconfigured` marks those where
no request left the process.

Importing this package loads no model and imports neither onnxruntime nor urllib.
"""

from __future__ import annotations

from cpersona.embedding.base import EmbeddingMisconfigured, EmbeddingProvider, Kind
from cpersona.embedding.cache import CachedProvider
from cpersona.embedding.factory import make_provider

__all__ = [
    "CachedProvider",
    "EmbeddingMisconfigured",
    "EmbeddingProvider",
    "Kind",
    "make_provider",
]
