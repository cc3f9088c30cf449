"""What the `http` and `api` providers share: the endpoint, one JSON POST, the vector checks.

The acceptance checks are those of spec surface.md §12.1, in its order: a status outside 2xx,
a body over 64 MiB (declared or actual), then the shape of what came back. A backend that
answers something else produces no vectors at all for the call; nothing is half-accepted.

Error text names the endpoint only as scheme://host[:port]/path: credentials may sit in the
URL's userinfo or query string and must never reach a log or a health report (§12.3).
"""

from __future__ import annotations

import base64
import functools
import http.client
import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit, urlunsplit

import numpy as np

from cpersona import __version__
from cpersona.embedding.base import MAX_BATCH, EmbeddingMisconfigured, Kind, check_texts, empty
from cpersona.errors import EmbeddingUnavailable

MAX_BODY_BYTES = 64 * 1024 * 1024
MAX_VECTORS = 512
MAX_WIDTH = 16384
_F32_MAX = float(np.finfo(np.float32).max)
_READ_CHUNK = 1 << 16


@dataclass(frozen=True, slots=True)
class Endpoint:
    """A parsed embedding URL."""

    url: str  # what is requested: the configured URL without its userinfo
    label: str  # scheme://host[:port]/path, the only form allowed in error text
    authorization: str | None  # a Basic header built from the URL's userinfo, if any


def parse_endpoint(raw: str, setting: str) -> Endpoint:
    """Check and split the URL configured in `setting` (a variable name, for the message).

    Raises:
        EmbeddingMisconfigured: the URL is empty, not http(s), or has no host or a bad port.
    """
    if not raw.strip():
        raise EmbeddingMisconfigured(f"{setting} is not set")
    parts = urlsplit(raw.strip())
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https") or not parts.hostname:
        # The raw value may hold a credential; say only what is wrong with it.
        raise EmbeddingMisconfigured(f"{setting} is not an http:// or https:// URL with a host")
    try:
        port = parts.port
    except ValueError:
        raise EmbeddingMisconfigured(f"{setting} has an invalid port") from None
    host = parts.hostname
    if ":" in host:
        host = f"[{host}]"
    netloc = host if port is None else f"{host}:{port}"
    authorization = None
    if parts.username is not None:
        pair = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
        authorization = "Basic " + base64.b64encode(pair.encode("utf-8")).decode("ascii")
    return Endpoint(
        url=urlunsplit((scheme, netloc, parts.path, parts.query, "")),
        label=urlunsplit((scheme, netloc, parts.path, "", "")),
        authorization=authorization,
    )


def post_json(
    endpoint: Endpoint,
    payload: object,
    *,
    timeout: float,
    headers: Mapping[str, str] | None = None,
    want_body: bool = True,
) -> object:
    """POST `payload` as JSON and return the decoded answer (None when not `want_body`: any
    2xx is the answer, whatever its body).

    `timeout` bounds each socket operation and, checked between reads, the whole body.

    Raises:
        EmbeddingUnavailable: unreachable, a status outside 2xx, a timeout, a body over
            MAX_BODY_BYTES or one that is not JSON.
    """
    body = json.dumps(payload).encode("ascii")  # ensure_ascii: lone surrogates stay valid JSON
    request = urllib.request.Request(endpoint.url, data=body, method="POST")
    request.add_header("Content-Type", "application/json")
    request.add_header("Accept", "application/json")
    request.add_header("User-Agent", f"cpersona/{__version__}")
    if endpoint.authorization:
        request.add_header("Authorization", endpoint.authorization)
    for name, value in (headers or {}).items():
        request.add_header(name, value)
    label = endpoint.label
    deadline = time.monotonic() + timeout
    try:
        with _opener().open(request, timeout=timeout) as response:
            raw = _read_capped(response, label, deadline, timeout)
    except urllib.error.HTTPError as exc:
        exc.close()
        raise EmbeddingUnavailable(f"{label} answered HTTP {exc.code}") from None
    except urllib.error.URLError as exc:
        if isinstance(exc.reason, TimeoutError):
            raise _timed_out(label, timeout) from None
        raise EmbeddingUnavailable(f"could not reach {label}: {exc.reason}") from None
    except TimeoutError:
        raise _timed_out(label, timeout) from None
    except (http.client.InvalidURL, ValueError):
        # http.client quotes the offending path and query in this message; say less.
        raise EmbeddingMisconfigured(f"{label} is not a URL a request can be sent to") from None
    except (http.client.HTTPException, OSError) as exc:
        raise EmbeddingUnavailable(f"could not reach {label}: {_describe(exc)}") from None
    if not want_body:
        return None
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):
        raise EmbeddingUnavailable(f"{label} answered with a body that is not JSON") from None


def answer_items(answer: object, key: str, label: str, count: int, *, wrong: str) -> list[object]:
    """The list under `key` of a JSON answer to a request for `count` texts: one item per
    text, at most MAX_VECTORS (`wrong` says what came instead of a list, in the error).

    Raises:
        EmbeddingUnavailable: the answer is no object, or the list is missing, empty, not a
            list, or of another length.
    """
    if not isinstance(answer, dict):
        raise EmbeddingUnavailable(f"{label} answered with JSON that is not an object")
    items = answer.get(key)
    if items is None or items == []:
        raise EmbeddingUnavailable(f"{label} returned no embeddings")
    if not isinstance(items, list):
        raise EmbeddingUnavailable(f"{label} returned {wrong}")
    if len(items) > MAX_VECTORS:
        raise EmbeddingUnavailable(
            f"{label} returned {len(items)} vectors, more than {MAX_VECTORS}"
        )
    if len(items) != count:
        raise EmbeddingUnavailable(f"{label} returned {len(items)} vectors for {count} texts")
    return items


def to_matrix(vectors: list[object], label: str) -> np.ndarray:
    """Check the vectors of one answer and stack them.

    Each must be a non-empty JSON array of at most MAX_WIDTH numbers (booleans refused), all
    finite and inside float32's range, and all of one width.

    Returns:
        (n, width) float32, C-contiguous, values exactly as sent (no normalisation).

    Raises:
        EmbeddingUnavailable: naming the first offending vector.
    """
    rows: list[np.ndarray] = []
    for i, vector in enumerate(vectors):
        if not isinstance(vector, list) or not vector:
            raise EmbeddingUnavailable(f"{label} returned vector {i} that is not a non-empty list")
        if len(vector) > MAX_WIDTH:
            raise EmbeddingUnavailable(
                f"{label} returned vector {i} wider than {MAX_WIDTH} values ({len(vector)})"
            )
        # Exact type checks: bool is a subclass of int, and JSON true is not a coordinate.
        if not all(type(x) is float or type(x) is int for x in vector):
            raise EmbeddingUnavailable(f"{label} returned vector {i} with a non-number in it")
        try:
            row = np.array(vector, dtype=np.float64)
        except OverflowError:  # an integer beyond float64
            raise EmbeddingUnavailable(
                f"{label} returned vector {i} that overflows float32"
            ) from None
        if not np.isfinite(row).all():
            raise EmbeddingUnavailable(f"{label} returned vector {i} with a non-finite value")
        if float(np.abs(row).max()) > _F32_MAX:
            raise EmbeddingUnavailable(f"{label} returned vector {i} that overflows float32")
        if rows and row.shape[0] != rows[0].shape[0]:
            raise EmbeddingUnavailable(
                f"{label} returned vectors of different widths ({rows[0].shape[0]} and "
                f"{row.shape[0]})"
            )
        rows.append(row)
    return np.ascontiguousarray(np.vstack(rows), dtype=np.float32)


class WidthLatch:
    """The vector width a provider learned from its first accepted answer (§7.5, §12.3)."""

    def __init__(self) -> None:
        self._width: int | None = None
        self._lock = threading.Lock()

    @property
    def width(self) -> int | None:
        return self._width

    def accept(self, width: int, label: str) -> None:
        """Learn `width`, or check it against the one already learned.

        Raises:
            EmbeddingUnavailable: the width differs from the learned one.
        """
        with self._lock:
            if self._width is None:
                self._width = width
            elif width != self._width:
                raise EmbeddingUnavailable(
                    f"{label} returned {width}-wide vectors but its first answer was "
                    f"{self._width}-wide"
                )


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    # urllib would follow a 301/302 of our POST as a GET without the body; an embedding
    # endpoint that redirects is misconfigured, so the 3xx surfaces as a non-2xx failure.
    def redirect_request(self, *args: object, **kwargs: object) -> None:
        return None


@functools.cache
def _opener() -> urllib.request.OpenerDirector:
    return urllib.request.build_opener(_NoRedirect)


def _read_capped(
    response: http.client.HTTPResponse, label: str, deadline: float, timeout: float
) -> bytes:
    too_big = EmbeddingUnavailable(f"{label} answered with a body over {MAX_BODY_BYTES} bytes")
    declared = (response.headers.get("Content-Length") or "").strip()
    if declared.isascii() and declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        raise too_big
    chunks: list[bytes] = []
    total = 0
    while True:
        chunk = response.read1(_READ_CHUNK)  # whatever has arrived, so the deadline is checked
        if not chunk:
            return b"".join(chunks)
        total += len(chunk)
        if total > MAX_BODY_BYTES:
            raise too_big
        if time.monotonic() > deadline:
            # Each read is bounded by the socket timeout; this bounds a backend that keeps
            # trickling bytes just fast enough to never trip it.
            raise _timed_out(label, timeout)
        chunks.append(chunk)


def _timed_out(label: str, timeout: float) -> EmbeddingUnavailable:
    return EmbeddingUnavailable(f"{label} did not answer within {timeout:g} s")


def _describe(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__


class PostingProvider:
    """What the `http` and `api` providers share: the endpoint parsed once (a bad URL fails
    each call instead of stopping the server, so recall reports a `misconfigured` fault,
    spec §12.5), the width latch, and batching to at most `MAX_BATCH` texts per request.

    Subclasses set `name` and implement `_request(endpoint, texts) -> (n, dim) float32`.
    """

    available = True

    def __init__(self, url: str, setting: str, *, timeout: float) -> None:
        self._timeout = timeout
        self._width = WidthLatch()
        self._endpoint: Endpoint | None = None
        self._problem: EmbeddingMisconfigured | None = None
        try:
            self._endpoint = parse_endpoint(url, setting)
        except EmbeddingMisconfigured as exc:
            self._problem = exc

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

    def _request(self, endpoint: Endpoint, texts: list[str]) -> np.ndarray:
        raise NotImplementedError
