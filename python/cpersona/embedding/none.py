"""The provider of `CPERSONA_EMBEDDING_MODE=none`: no vectors, ever, and it says so."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NoReturn

from cpersona.embedding.base import EmbeddingMisconfigured, Kind

REASON = "embedding mode is none: recall uses full-text and keyword search only"


class NoneProvider:
    """Refuses every call; callers check `available` and skip the vector arm."""

    name = "none"
    available = False

    def dim(self) -> None:
        return None

    def embed(self, texts: Sequence[str], *, kind: Kind = "passage") -> NoReturn:
        raise EmbeddingMisconfigured(REASON)

    def close(self) -> None:
        pass
