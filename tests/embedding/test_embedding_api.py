"""The `api` provider (OpenAI-compatible) against a loopback stand-in for the API."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from cpersona.embedding import EmbeddingMisconfigured
from cpersona.embedding.api import ApiProvider
from cpersona.errors import EmbeddingUnavailable
from embedding_fakes import EmbeddingService, Reply, Seen, assert_rejected

KEY = "sk-test-s3cret"


def provider(
    embedding_service: EmbeddingService,
    *,
    api_key: str = KEY,
    model: str = "text-embedding-3-small",
) -> ApiProvider:
    return ApiProvider(
        embedding_service.url("/v1/embeddings"), api_key=api_key, model=model, timeout=5
    )


def data(vectors: list[Any], order: list[int] | None = None) -> dict[str, Any]:
    """An OpenAI-style answer; `order` lists the indices in the order they are sent."""
    order = list(range(len(vectors))) if order is None else order
    items = [{"object": "embedding", "index": i, "embedding": vectors[i]} for i in order]
    return {"object": "list", "data": items, "model": "m", "usage": {"total_tokens": 3}}


def test_api_sends_model_input_and_bearer_key(embedding_service: EmbeddingService) -> None:
    embedding_service.reply(Reply(data([[1.0, 0.0], [0.0, 1.0]])))
    p = provider(embedding_service, model="my-model")
    assert p.name == "api:my-model" and p.available and p.dim() is None
    p.embed(["a", "b"], kind="query")
    (seen,) = embedding_service.requests
    assert seen.path == "/v1/embeddings"
    assert seen.body == {"model": "my-model", "input": ["a", "b"]}
    assert seen.headers["Authorization"] == f"Bearer {KEY}"
    assert p.dim() == 2


def test_api_without_key_sends_no_authorization(embedding_service: EmbeddingService) -> None:
    embedding_service.reply(Reply(data([[1.0]])))
    provider(embedding_service, api_key="").embed(["a"])
    assert "Authorization" not in embedding_service.requests[0].headers


def test_api_places_items_by_index_and_normalises(embedding_service: EmbeddingService) -> None:
    embedding_service.reply(Reply(data([[3.0, 4.0], [0.0, 2.0], [1.0, 1.0]], order=[2, 0, 1])))
    out = provider(embedding_service).embed(["a", "b", "c"])
    assert out.dtype == np.float32 and out.flags["C_CONTIGUOUS"]
    np.testing.assert_allclose(out, [[0.6, 0.8], [0.0, 1.0], [2**-0.5, 2**-0.5]], rtol=1e-6)


def test_api_leaves_near_zero_vectors_unscaled(embedding_service: EmbeddingService) -> None:
    embedding_service.reply(Reply(data([[0.0, 0.0], [1e-10, 0.0], [0.0, 5.0]])))
    out = provider(embedding_service).embed(["a", "b", "c"])
    np.testing.assert_array_equal(out, np.array([[0.0, 0.0], [1e-10, 0.0], [0.0, 1.0]], np.float32))


def test_api_sends_at_most_32_texts_per_request(embedding_service: EmbeddingService) -> None:
    def answer(seen: Seen) -> Reply:
        n = len(seen.body["input"])
        return Reply(data([[1.0, float(i)] for i in range(n)]))

    embedding_service.answer = answer
    out = provider(embedding_service).embed([f"t{i}" for i in range(40)])
    assert [len(seen.body["input"]) for seen in embedding_service.requests] == [32, 8]
    assert out.shape == (40, 2)
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, rtol=1e-6)


def indexed(*items: tuple[Any, Any]) -> dict[str, Any]:
    """An answer whose items carry exactly these (index, embedding) pairs; None omits a key."""
    data = []
    for index, embedding in items:
        item = {"index": index, "embedding": embedding}
        data.append({k: v for k, v in item.items() if v is not None})
    return {"data": data}


BAD_ANSWERS = {
    "unauthorised": (Reply({"error": {"message": f"bad key {KEY}"}}, status=401), "HTTP 401"),
    "not an object": (Reply([[1.0]]), "not an object"),
    "data missing": (Reply({"embeddings": [[1.0]]}), "no embeddings"),
    "data empty": (Reply({"data": []}), "no embeddings"),
    "data not a list": (Reply({"data": {"0": [1.0]}}), "not a list"),
    "count mismatch": (Reply(data([[1.0], [1.0], [1.0]])), "3 vectors for 2 texts"),
    "over 512 items": (Reply(data([[1.0]] * 513)), "more than 512"),
    "item not an object": (Reply({"data": [[1.0], [1.0]]}), "not an object"),
    "index missing": (Reply(indexed((None, [1.0]), (1, [1.0]))), "0..1"),
    "duplicate index": (Reply(indexed((0, [1.0]), (0, [1.0]))), "0..1"),
    "index out of range": (Reply(indexed((0, [1.0]), (2, [1.0]))), "0..1"),
    "negative index": (Reply(indexed((-1, [1.0]), (0, [1.0]))), "0..1"),
    "boolean index": (Reply(indexed((False, [1.0]), (True, [1.0]))), "0..1"),
    "string index": (Reply(indexed(("0", [1.0]), (1, [1.0]))), "0..1"),
    "float index": (Reply(indexed((0.0, [1.0]), (1, [1.0]))), "0..1"),
    "embedding missing": (Reply(indexed((0, None), (1, [1.0]))), "not a non-empty list"),
    "base64 embedding": (Reply(data(["AACAPw==", "AACAPw=="])), "not a non-empty list"),
    "non-number": (Reply(data([[1.0], ["1.0"]])), "non-number"),
    "boolean value": (Reply(data([[1.0], [True]])), "non-number"),
    "non-finite": (
        Reply(b'{"data": [{"index": 0, "embedding": [NaN]}, {"index": 1, "embedding": [1]}]}'),
        "non-finite",
    ),
    "float32 overflow": (Reply(data([[1.0], [4e38]])), "overflows float32"),
    "too wide": (Reply(data([[1.0] * 16385, [1.0] * 16385])), "wider than 16384"),
    "mixed widths": (Reply(data([[1.0], [1.0, 0.0]])), "different widths"),
}


@pytest.mark.parametrize("answer, words", BAD_ANSWERS.values(), ids=BAD_ANSWERS.keys())
def test_api_rejects_bad_answer(
    embedding_service: EmbeddingService, answer: Reply, words: str
) -> None:
    embedding_service.reply(answer)
    error = assert_rejected(provider(embedding_service), ["a", "b"], words)
    assert KEY not in str(error)


def test_api_rejects_a_width_other_than_the_first_accepted(
    embedding_service: EmbeddingService,
) -> None:
    p = provider(embedding_service)
    embedding_service.reply(Reply(data([[1.0, 0.0]])))
    p.embed(["a"])
    embedding_service.reply(Reply(data([[1.0, 0.0, 0.0]])))
    with pytest.raises(EmbeddingUnavailable, match="3-wide vectors but its first answer was 2"):
        p.embed(["a"])


def test_api_bad_url_is_misconfigured() -> None:
    p = ApiProvider("not a url", api_key=KEY, model="m", timeout=5)
    with pytest.raises(EmbeddingMisconfigured, match="CPERSONA_EMBEDDING_API_URL"):
        p.embed(["a"])


def test_api_empty_input_sends_nothing(embedding_service: EmbeddingService) -> None:
    assert provider(embedding_service).embed([]).shape == (0, 0)
    assert embedding_service.requests == []
