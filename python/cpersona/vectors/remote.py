"""The remote vector service (`CPERSONA_VECTOR_SEARCH_MODE=remote`; surface.md §12.4,
retrieval.md §4.5): a client of 2.5.x's `/index`, `/search`, `/remove` and `/purge` calls.

The service lives beside the http embedding server: its base URL is the embedding URL without
its last path segment. Namespaces are `cpersona:<agent_id>`, item ids `mem:<id>` / `ep:<id>`.
Every call is non-fatal: the local row is already committed when the service is told, so a
failure is one WARNING and never an error to the caller. A search that fails in any way returns
None and recall runs its local scan instead.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

from cpersona.config import Settings
from cpersona.errors import EmbeddingMisconfigured, EmbeddingUnavailable

log = logging.getLogger("cpersona.remote")

#: Items per `/index` request (§12.4).
INDEX_BATCH = 128


@dataclass(frozen=True, slots=True)
class Item:
    """One row for the service: `mem:<id>` or `ep:<id>` and the text it embeds."""

    id: str
    text: str


@dataclass(frozen=True, slots=True)
class Hit:
    kind: str  # "mem" | "ep"
    row_id: int
    score: float


def namespace(agent_id: str) -> str:
    return f"cpersona:{agent_id}"


def base_url(embedding_url: str) -> str:
    """`http://h:8401/embed` -> `http://h:8401` (the last path segment removed)."""
    parts = urlsplit(embedding_url.strip())
    path = parts.path.rstrip("/")
    path = path[: path.rfind("/")] if "/" in path else ""
    return urlunsplit((parts.scheme, parts.netloc, path, "", ""))


class RemoteVectors:
    """The service's client; thread-safe (one urllib request per call, nothing shared)."""

    def __init__(self, base: str, *, search_timeout: float, index_timeout: float) -> None:
        self.base = base.rstrip("/")
        self.search_timeout = search_timeout
        self.index_timeout = index_timeout

    @classmethod
    def from_settings(cls, settings: Settings) -> RemoteVectors | None:
        """The client when remote mode is on and the embedder is the http one, else None.

        Remote search needs the http embedding server's URL (retrieval.md §4.5); in any other
        embedding mode remote mode changes nothing and the local scan serves.
        """
        if settings.vector_search_mode != "remote":
            return None
        if settings.embedding_mode != "http" or not settings.embedding_url.strip():
            log.warning(
                "CPERSONA_VECTOR_SEARCH_MODE=remote needs CPERSONA_EMBEDDING_MODE=http and "
                "CPERSONA_EMBEDDING_URL; vector search stays local"
            )
            return None
        return cls(
            base_url(settings.embedding_url),
            search_timeout=settings.remote_search_timeout_secs,
            index_timeout=settings.remote_index_timeout_secs,
        )

    def _post(
        self, call: str, payload: dict[str, object], timeout: float, *, want_body: bool = True
    ) -> object:
        # The wire helpers come with numpy: imported at the first call, never at start-up
        # (the portability tools import this module to name the service's items).
        from cpersona.embedding import _wire

        endpoint = _wire.parse_endpoint(f"{self.base}/{call}", "CPERSONA_EMBEDDING_URL")
        return _wire.post_json(endpoint, payload, timeout=timeout, want_body=want_body)

    def _tell(self, call: str, payload: dict[str, object]) -> bool:
        try:
            self._post(call, payload, self.index_timeout, want_body=False)
        except (EmbeddingUnavailable, EmbeddingMisconfigured) as exc:
            log.warning("remote vector %s failed (the local rows are kept): %s", call, exc)
            return False
        return True

    def index(self, agent_id: str, items: Sequence[Item]) -> bool:
        """Send `items` in batches of 128; True when every request was answered 2xx."""
        ok = True
        for start in range(0, len(items), INDEX_BATCH):
            batch = items[start : start + INDEX_BATCH]
            payload: dict[str, object] = {
                "namespace": namespace(agent_id),
                "items": [{"id": i.id, "text": i.text} for i in batch],
            }
            ok = self._tell("index", payload) and ok
        return ok

    def remove(self, agent_id: str, ids: Sequence[str]) -> bool:
        if not ids:
            return True
        return self._tell("remove", {"namespace": namespace(agent_id), "ids": list(ids)})

    def purge(self, agent_id: str) -> bool:
        return self._tell("purge", {"namespace": namespace(agent_id)})

    def search(
        self, agent_id: str, query: str, limit: int, min_similarity: float
    ) -> list[Hit] | None:
        """The service's ranked hits (authoritative, even when empty), or None to fall back."""
        payload: dict[str, object] = {
            "namespace": namespace(agent_id),
            "query": query,
            "limit": limit,
            "min_similarity": min_similarity,
        }
        try:
            answer = self._post("search", payload, self.search_timeout)
        except (EmbeddingUnavailable, EmbeddingMisconfigured) as exc:
            log.warning("remote vector search failed; using the local scan: %s", exc)
            return None
        results = answer.get("results") if isinstance(answer, dict) else None
        if not isinstance(results, list):
            log.warning("remote vector search answered without a results list; local scan")
            return None
        try:
            return [hit for r in results if (hit := _hit(r)) is not None]
        except (TypeError, ValueError) as exc:
            log.warning("remote vector search answered malformed results (%s); local scan", exc)
            return None


def _hit(result: object) -> Hit | None:
    """One result; None for an id of an unknown kind (ignored, §4.5)."""
    if not isinstance(result, dict):
        raise TypeError("a result is not an object")
    ident, score = result.get("id"), result.get("score")
    if not isinstance(ident, str) or isinstance(score, bool) or not isinstance(score, int | float):
        raise TypeError("a result lacks a string id or a numeric score")
    kind, _, number = ident.partition(":")
    if kind not in ("mem", "ep") or not number.isdigit():
        return None
    return Hit(kind, int(number), float(score))
