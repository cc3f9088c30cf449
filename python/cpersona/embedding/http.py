"""The `http` provider: the CPersona embedding contract (spec surface.md §12.1).

    POST <url>  {"texts": [...]}  ->  200 {"embeddings": [[...], ...], ...}

The backend promises unit vectors, one per text in input order, and the contract is role-less
(no query/passage prefix). Vectors are used as returned: renormalising here would hide a
backend that breaks the contract, which `deep_check`'s `embedding_norm` exists to report.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from cpersona.embedding import _wire
from cpersona.embedding.base import MAX_BATCH, EmbeddingMisconfigured, Kind, check_texts, empty
from cpersona.errors import EmbeddingUnavailable

SETTING = "CPERSONA_EMBEDDING_URL"


class HttpProvider:
    """Client of a CPersona embedding server at `url`; safe to share between threads.

    Args:
        url: the endpoint; userinfo in it is sent as HTTP Basic credentials.
        timeout: seconds allowed per request.
    """

    available = True

    def __init__(self, url: str, *, timeout: float) -> None:
        self._timeout = timeout
        self._width = _wire.WidthLatch()
        # A bad URL is reported by each call rather than here, so the server still starts
        # and recall reports a `misconfigured` fault (§12.5) instead of refusing to run.
        self._endpoint: _wire.Endpoint | None = None
        self._problem: EmbeddingMisconfigured | None = None
        try:
            self._endpoint = _wire.parse_endpoint(url, SETTING)
            self.name = f"http:{self._endpoint.label}"
        except EmbeddingMisconfigured as exc:
            self._problem = exc
            self.name = "http:<unconfigured>"

    def dim(self) -> int | None:
        return self._width.width

    def embed(self, texts: Sequence[str], *, kind: Kind = "passage") -> np.ndarray:
        batch = check_texts(texts)
        if not batch:
            return empty(self.dim())
        if self._endpoint is None:
            raise EmbeddingMisconfigured(str(self._problem))
        parts = [
            self._request(self._endpoint, batch[i : i + MAX_BATCH])
            for i in range(0, len(batch), MAX_BATCH)
        ]
        return parts[0] if len(parts) == 1 else np.ascontiguousarray(np.vstack(parts))

    def close(self) -> None:
        pass  # urllib opens a connection per request; nothing is held between calls

    def _request(self, endpoint: _wire.Endpoint, texts: list[str]) -> np.ndarray:
        label = endpoint.label
        answer = _wire.post_json(endpoint, {"texts": texts}, timeout=self._timeout)
        if not isinstance(answer, dict):
            raise EmbeddingUnavailable(f"{label} answered with JSON that is not an object")
        vectors = answer.get("embeddings")
        if vectors is None or vectors == []:
            raise EmbeddingUnavailable(f"{label} returned no embeddings")
        if not isinstance(vectors, list):
            raise EmbeddingUnavailable(f"{label} returned embeddings that are not a list")
        if len(vectors) > _wire.MAX_VECTORS:
            raise EmbeddingUnavailable(
                f"{label} returned {len(vectors)} vectors, more than {_wire.MAX_VECTORS}"
            )
        if len(vectors) != len(texts):
            raise EmbeddingUnavailable(
                f"{label} returned {len(vectors)} vectors for {len(texts)} texts"
            )
        matrix = _wire.to_matrix(vectors, label)
        self._width.accept(matrix.shape[1], label)
        return matrix
