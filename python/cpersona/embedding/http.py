"""The `http` provider: the CPersona embedding contract (spec surface.md §12.1).

    POST <url>  {"texts": [...]}  ->  200 {"embeddings": [[...], ...], ...}

The backend promises unit vectors, one per text in input order, and the contract is role-less
(no query/passage prefix). Vectors are used as returned: renormalising here would hide a
backend that breaks the contract, which `deep_check`'s `embedding_norm` exists to report.
"""

from __future__ import annotations

import numpy as np

from cpersona.embedding import _wire

SETTING = "CPERSONA_EMBEDDING_URL"


class HttpProvider(_wire.PostingProvider):
    """Client of a CPersona embedding server at `url`; safe to share between threads.

    Args:
        url: the endpoint; userinfo in it is sent as HTTP Basic credentials.
        timeout: seconds allowed per request.
    """

    def __init__(self, url: str, *, timeout: float) -> None:
        super().__init__(url, SETTING, timeout=timeout)
        label = self._endpoint.label if self._endpoint is not None else "<unconfigured>"
        self.name = f"http:{label}"

    def _request(self, endpoint: _wire.Endpoint, texts: list[str]) -> np.ndarray:
        label = endpoint.label
        answer = _wire.post_json(endpoint, {"texts": texts}, timeout=self._timeout)
        vectors = _wire.answer_items(
            answer, "embeddings", label, len(texts), wrong="embeddings that are not a list"
        )
        matrix = _wire.to_matrix(vectors, label)
        self._width.accept(matrix.shape[1], label)
        return matrix
