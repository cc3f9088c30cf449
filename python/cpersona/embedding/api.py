"""The `api` provider: an OpenAI-compatible embeddings endpoint (spec surface.md §12.2).

    POST <url>  {"model": m, "input": [...]}  ->  {"data": [{"index": i, "embedding": [...]}]}

Such APIs do not promise unit vectors, so rows are L2-normalised here; a row whose norm is
<= 1e-9 is left as it is rather than scaled up into noise.
"""

from __future__ import annotations

import numpy as np

from cpersona.embedding import _wire
from cpersona.embedding.base import l2_normalise
from cpersona.errors import EmbeddingUnavailable

SETTING = "CPERSONA_EMBEDDING_API_URL"
_NORM_FLOOR = 1e-9


class ApiProvider(_wire.PostingProvider):
    """Client of an OpenAI-compatible `/v1/embeddings` endpoint; safe to share between threads.

    Args:
        url: the endpoint.
        api_key: sent as `Authorization: Bearer <key>`; empty sends no Authorization header
            (local OpenAI-compatible servers often need none).
        model: the `model` field of every request.
        timeout: seconds allowed per request.
    """

    def __init__(self, url: str, *, api_key: str, model: str, timeout: float) -> None:
        super().__init__(url, SETTING, timeout=timeout)
        self.name = f"api:{model}"
        self._model = model
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}

    def _request(self, endpoint: _wire.Endpoint, texts: list[str]) -> np.ndarray:
        label = endpoint.label
        payload = {"model": self._model, "input": texts}
        answer = _wire.post_json(endpoint, payload, timeout=self._timeout, headers=self._headers)
        items = _wire.answer_items(
            answer, "data", label, len(texts), wrong="`data` that is not a list"
        )
        matrix = _wire.to_matrix(_placed(items, label), label)
        self._width.accept(matrix.shape[1], label)
        return l2_normalise(matrix, floor=_NORM_FLOOR)


def _placed(items: list[object], label: str) -> list[object]:
    """The `embedding` of each item, in `index` order; the indices must be exactly 0..n-1."""
    placed: list[object] = [None] * len(items)
    seen = [False] * len(items)
    for item in items:
        if not isinstance(item, dict):
            raise EmbeddingUnavailable(f"{label} returned a `data` item that is not an object")
        index = item.get("index")
        if type(index) is not int or not 0 <= index < len(items) or seen[index]:
            raise EmbeddingUnavailable(
                f"{label} returned indices that are not exactly 0..{len(items) - 1}"
            )
        seen[index] = True
        placed[index] = item.get("embedding")
    return placed
