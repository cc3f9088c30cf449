"""The `http` provider against a loopback backend: the contract and every acceptance check."""

from __future__ import annotations

import re
import socket

import numpy as np
import pytest
from cpersona.embedding import EmbeddingMisconfigured, EmbeddingProvider, _wire
from cpersona.embedding.http import HttpProvider
from cpersona.errors import EmbeddingUnavailable
from embedding_fakes import EmbeddingService, Reply, assert_rejected, unit


def provider(embedding_service: EmbeddingService, *, timeout: float = 5.0) -> HttpProvider:
    return HttpProvider(embedding_service.url(), timeout=timeout)


def test_http_returns_vectors_in_input_order(embedding_service: EmbeddingService) -> None:
    embedding_service.embeddings(width=4)
    p = provider(embedding_service)
    assert isinstance(p, EmbeddingProvider)
    assert p.dim() is None
    out = p.embed(["a", "b", "c"], kind="query")
    assert out.dtype == np.float32 and out.flags["C_CONTIGUOUS"]
    np.testing.assert_array_equal(out, np.eye(4, dtype=np.float32)[:3])
    assert p.dim() == 4
    (seen,) = embedding_service.requests
    assert seen.path == "/embed"
    assert seen.body == {"texts": ["a", "b", "c"]}  # role-less: no kind, no prefix
    assert seen.headers["Content-Type"] == "application/json"
    assert "Authorization" not in seen.headers


def test_http_name_is_the_endpoint(embedding_service: EmbeddingService) -> None:
    host, port = embedding_service.url().split("//")[1].split("/")[0].split(":")
    assert provider(embedding_service).name == f"http:http://{host}:{port}/embed"


def test_http_uses_vectors_as_returned(embedding_service: EmbeddingService) -> None:
    # The contract puts normalisation on the backend; the client must not hide a violation.
    embedding_service.reply(Reply({"embeddings": [[3.0, 4.0]], "dimensions": 2}))
    np.testing.assert_array_equal(provider(embedding_service).embed(["x"]), [[3.0, 4.0]])


def test_http_accepts_integers_and_ignores_other_keys(embedding_service: EmbeddingService) -> None:
    embedding_service.reply(Reply({"embeddings": [[0, 1]], "model": "m", "dimensions": 99}))
    np.testing.assert_array_equal(provider(embedding_service).embed(["x"]), [[0.0, 1.0]])


def test_http_sends_at_most_32_texts_per_request(embedding_service: EmbeddingService) -> None:
    embedding_service.embeddings(width=8)
    texts = [f"t{i}" for i in range(70)]
    out = provider(embedding_service).embed(texts)
    assert [len(seen.body["texts"]) for seen in embedding_service.requests] == [32, 32, 6]
    assert [t for seen in embedding_service.requests for t in seen.body["texts"]] == texts
    np.testing.assert_array_equal(out, [unit(8, i % 32) for i in range(70)])


def test_http_empty_input_sends_nothing(embedding_service: EmbeddingService) -> None:
    out = provider(embedding_service).embed([])
    assert out.shape == (0, 0) and out.dtype == np.float32
    assert embedding_service.requests == []


def test_http_refuses_a_bare_string(embedding_service: EmbeddingService) -> None:
    with pytest.raises(TypeError):
        provider(embedding_service).embed("hello")


def test_http_escapes_lone_surrogates(embedding_service: EmbeddingService) -> None:
    embedding_service.embeddings()
    provider(embedding_service).embed(["bad \ud800 text"])
    assert embedding_service.requests[0].body == {"texts": ["bad \ud800 text"]}


# Each case: the backend's answer to one text, and words the failure must mention.
BAD_ANSWERS = {
    "server error": (Reply({"error": "boom"}, status=500), "HTTP 500"),
    "client error": (Reply({"error": "no"}, status=404), "HTTP 404"),
    "redirect not followed": (Reply(b"", status=302, headers={"Location": "/x"}), "HTTP 302"),
    "not json": (Reply(b"<html>oops</html>"), "not JSON"),
    "not an object": (Reply([[0.0, 1.0]]), "not an object"),
    "embeddings missing": (Reply({"vectors": [[1.0]]}), "no embeddings"),
    "embeddings null": (Reply({"embeddings": None}), "no embeddings"),
    "embeddings empty": (Reply({"embeddings": []}), "no embeddings"),
    "embeddings not a list": (Reply({"embeddings": "0.1,0.2"}), "not a list"),
    "over 512 vectors": (Reply({"embeddings": [[1.0]] * 513}), "more than 512"),
    "count mismatch": (Reply({"embeddings": [[1.0], [1.0]]}), "2 vectors for 1 texts"),
    "vector not a list": (Reply({"embeddings": [{"0": 1.0}]}), "not a non-empty list"),
    "empty vector": (Reply({"embeddings": [[]]}), "not a non-empty list"),
    "too wide": (Reply({"embeddings": [[0.0] * 16385]}), "wider than 16384"),
    "string value": (Reply({"embeddings": [[0.5, "0.5"]]}), "non-number"),
    "null value": (Reply({"embeddings": [[0.5, None]]}), "non-number"),
    "boolean value": (Reply({"embeddings": [[True, False]]}), "non-number"),
    "nan": (Reply(b'{"embeddings": [[NaN, 1.0]]}'), "non-finite"),
    "infinity": (Reply(b'{"embeddings": [[-Infinity, 1.0]]}'), "non-finite"),
    "overflowing float": (Reply(b'{"embeddings": [[1e308, 1.0]]}'), "overflows float32"),
    "float32 overflow": (Reply({"embeddings": [[3.5e38, 1.0]]}), "overflows float32"),
    "huge integer": (Reply(b'{"embeddings": [[1' + b"0" * 400 + b", 1.0]]}"), "overflows"),
}


@pytest.mark.parametrize("answer, words", BAD_ANSWERS.values(), ids=BAD_ANSWERS.keys())
def test_http_rejects_bad_answer(
    embedding_service: EmbeddingService, answer: Reply, words: str
) -> None:
    embedding_service.reply(answer)
    assert_rejected(provider(embedding_service), ["x"], words)


def test_http_rejects_mixed_widths_in_one_answer(embedding_service: EmbeddingService) -> None:
    embedding_service.reply(Reply({"embeddings": [[1.0, 0.0], [1.0]]}))
    with pytest.raises(EmbeddingUnavailable, match="different widths"):
        provider(embedding_service).embed(["a", "b"])


def test_http_rejects_a_width_other_than_the_first_accepted(
    embedding_service: EmbeddingService,
) -> None:
    p = provider(embedding_service)
    embedding_service.reply(Reply({"embeddings": [[1.0]]}))
    with pytest.raises(EmbeddingUnavailable):
        p.embed(["x", "y"])  # count mismatch: rejected, so width 1 is not learned
    embedding_service.embeddings(width=4)
    p.embed(["x"])
    embedding_service.embeddings(width=3)
    with pytest.raises(EmbeddingUnavailable, match="3-wide vectors but its first answer was 4"):
        p.embed(["x"])
    assert p.dim() == 4


def test_http_fails_the_whole_call_when_one_batch_fails(
    embedding_service: EmbeddingService,
) -> None:
    def answer(seen: object) -> Reply:
        return (
            Reply(status=503)
            if len(embedding_service.requests) == 2
            else Reply({"embeddings": [[1.0]] * 32})
        )

    embedding_service.answer = answer
    with pytest.raises(EmbeddingUnavailable, match="HTTP 503"):
        provider(embedding_service).embed(["t"] * 64)


def test_http_rejects_a_declared_body_over_64_mib(embedding_service: EmbeddingService) -> None:
    embedding_service.reply(Reply(b"{}", headers={"Content-Length": str(64 * 1024 * 1024 + 1)}))
    with pytest.raises(EmbeddingUnavailable, match="body over 67108864 bytes"):
        provider(embedding_service).embed(["x"])


def test_http_rejects_an_actual_body_over_the_cap(
    embedding_service: EmbeddingService, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The cap is lowered so the test need not send 64 MiB; the body declares no length.
    monkeypatch.setattr(_wire, "MAX_BODY_BYTES", 1000)
    embedding_service.reply(Reply({"embeddings": [[0.001] * 400]}, content_length=False))
    with pytest.raises(EmbeddingUnavailable, match="body over 1000 bytes"):
        provider(embedding_service).embed(["x"])


def test_http_reads_a_body_without_content_length(embedding_service: EmbeddingService) -> None:
    embedding_service.reply(Reply({"embeddings": [[0.6, 0.8]]}, content_length=False))
    np.testing.assert_allclose(provider(embedding_service).embed(["x"]), [[0.6, 0.8]])


def test_http_times_out_on_a_silent_backend(embedding_service: EmbeddingService) -> None:
    embedding_service.reply(Reply({"embeddings": [[1.0]]}, delay=30))
    with pytest.raises(EmbeddingUnavailable, match=r"did not answer within 0\.2 s"):
        provider(embedding_service, timeout=0.2).embed(["x"])


def test_http_times_out_on_a_trickling_backend(embedding_service: EmbeddingService) -> None:
    # Every byte arrives well inside the socket timeout; only the overall deadline stops it.
    embedding_service.reply(Reply({"embeddings": [[1.0] * 1000]}, trickle=0.02))
    with pytest.raises(EmbeddingUnavailable, match=r"did not answer within 0\.3 s"):
        provider(embedding_service, timeout=0.3).embed(["x"])


def test_http_reports_an_unreachable_backend() -> None:
    # Held bound, not listening, until the call is refused: a port released at once may be
    # taken meanwhile (a parallel worker's server).
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        p = HttpProvider(f"http://127.0.0.1:{port}/embed", timeout=5)
        with pytest.raises(
            EmbeddingUnavailable, match=re.escape(f"could not reach http://127.0.0.1:{port}/embed")
        ):
            p.embed(["x"])


@pytest.mark.parametrize(
    "url, words",
    [
        ("", "CPERSONA_EMBEDDING_URL is not set"),
        ("   ", "CPERSONA_EMBEDDING_URL is not set"),
        ("ftp://host/embed", "not an http:// or https:// URL"),
        ("127.0.0.1:8401/embed", "not an http:// or https:// URL"),
        ("http:///embed", "not an http:// or https:// URL"),
        ("http://host:99999/embed", "invalid port"),
        ("http://host:port/embed", "invalid port"),
    ],
)
def test_http_bad_url_fails_each_call_as_misconfigured(url: str, words: str) -> None:
    p = HttpProvider(url, timeout=5)  # constructing never raises: the server still starts
    assert p.available
    with pytest.raises(EmbeddingMisconfigured, match=re.escape(words)):
        p.embed(["x"])


def test_http_url_with_spaces_is_misconfigured_without_echoing_it(
    embedding_service: EmbeddingService,
) -> None:
    p = HttpProvider(embedding_service.url("/em bed", query="key=s3cret"), timeout=5)
    with pytest.raises(EmbeddingMisconfigured) as info:
        p.embed(["x"])
    assert "s3cret" not in str(info.value)


def test_http_error_text_never_contains_credentials(embedding_service: EmbeddingService) -> None:
    embedding_service.reply(Reply(b"denied: key=s3cret", status=401))
    p = HttpProvider(
        embedding_service.url(userinfo="alice:pa55word", query="key=s3cret"), timeout=5
    )
    with pytest.raises(EmbeddingUnavailable) as info:
        p.embed(["x"])
    for text in (str(info.value), p.name):
        assert "s3cret" not in text and "pa55word" not in text and "alice" not in text
    assert str(info.value) == f"{embedding_service.url()} answered HTTP 401"
    # The userinfo becomes Basic credentials and the query string is still sent.
    (seen,) = embedding_service.requests
    assert seen.headers["Authorization"] == "Basic YWxpY2U6cGE1NXdvcmQ="
    assert seen.path == "/embed?key=s3cret"


def test_http_close_is_harmless(embedding_service: EmbeddingService) -> None:
    embedding_service.embeddings()
    p = provider(embedding_service)
    p.close()
    assert p.embed(["x"]).shape == (1, 4)


@pytest.mark.parametrize(
    "raw, url, label",
    [
        ("http://h:8401/embed", "http://h:8401/embed", "http://h:8401/embed"),
        ("HTTPS://Host.Example/v1/e", "https://host.example/v1/e", "https://host.example/v1/e"),
        ("http://u:p@h/e?key=k#frag", "http://h/e?key=k", "http://h/e"),
        ("http://[::1]:8401/embed", "http://[::1]:8401/embed", "http://[::1]:8401/embed"),
        ("  http://h  ", "http://h", "http://h"),
    ],
)
def test_http_endpoint_parsing(raw: str, url: str, label: str) -> None:
    endpoint = _wire.parse_endpoint(raw, "X")
    assert (endpoint.url, endpoint.label) == (url, label)
    assert (endpoint.authorization is not None) == ("@" in raw)
