"""The embedding provider protocol and the helpers every provider shares.

A provider turns texts into rows of a float32 matrix. It never decides what to do when
embedding fails: it raises `EmbeddingUnavailable` with one sentence saying why, and the caller
degrades (spec surface.md §12.5: the row is stored without a vector, recall falls back to
full-text and keyword search).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Generic, Literal, Protocol, TypeVar, runtime_checkable

import numpy as np

# Re-exported: the providers raise them from here (`as` marks the export for mypy --strict).
from cpersona.errors import EmbeddingMisconfigured as EmbeddingMisconfigured
from cpersona.errors import EmbeddingUnavailable as EmbeddingUnavailable

#: Who a text is for. Models trained with instruction prefixes embed queries and stored
#: passages differently; the others (MiniLM, the http contract) ignore it.
Kind = Literal["query", "passage"]

#: Most texts sent to a backend or through the local model at once. The http contract
#: promises backends "at most 32 texts per request" (spec surface.md §12.1).
MAX_BATCH = 32


@runtime_checkable
class EmbeddingProvider(Protocol):
    """Turns texts into L2-normalised float32 vectors."""

    #: Identifies the model: recorded in the calibration sidecar and shown in health reports.
    name: str
    #: False only for the `none` provider, whose every call raises.
    available: bool

    def dim(self) -> int | None:
        """The vector width, or None until learned (http/api learn it from the first answer)."""
        ...

    def embed(self, texts: Sequence[str], *, kind: Kind = "passage") -> np.ndarray:
        """Embed `texts` in order.

        Returns:
            (n, dim) float32, C-contiguous, one L2-normalised row per text. An empty input
            gives (0, dim) (or (0, 0) while the width is unknown).

        Raises:
            EmbeddingUnavailable: with a one-sentence reason, for any failure; nothing is
                returned for any of the texts then.
        """
        ...

    def close(self) -> None:
        """Release the model or connection; the provider may be used again afterwards."""
        ...


def check_texts(texts: Sequence[str]) -> list[str]:
    """`texts` as a list, refusing a bare string (which would embed each character)."""
    if isinstance(texts, str):
        raise TypeError("embed() takes a sequence of texts, not a single str")
    return list(texts)


def empty(dim: int | None) -> np.ndarray:
    """The (0, dim) answer to an empty batch."""
    return np.empty((0, dim or 0), dtype=np.float32)


class BatchEmbedder:
    """What every provider of a known width shares: `embed` refuses a bare string, answers an
    empty batch without touching the model, and hands a non-empty one to `_embed_batch`.

    Subclasses set `name` and implement `dim` and `_embed_batch` (same contract as `embed`
    for a batch of at least one text); `close` does nothing unless they hold a model.
    """

    name: str
    available = True

    def dim(self) -> int:
        raise NotImplementedError

    def embed(self, texts: Sequence[str], *, kind: Kind = "passage") -> np.ndarray:
        batch = check_texts(texts)
        if not batch:
            return empty(self.dim())
        return self._embed_batch(batch, kind)

    def _embed_batch(self, batch: list[str], kind: Kind) -> np.ndarray:
        raise NotImplementedError

    def close(self) -> None:
        pass


M = TypeVar("M")


class LocalModel(BatchEmbedder, Generic[M]):
    """An in-process model of `width` columns: opened once, on the first `embed`, by one thread
    while the others wait; safe to share between threads. A model that cannot be opened is
    `EmbeddingMisconfigured` (what is wrong is the installation, not one text).

    Subclasses set `name`, `width` and `about` (how the errors name the model), and implement
    `_open` (make the model `M`) and `_embed_batch` (embed through `self._load()`).
    """

    width: int
    about: str

    def __init__(self, threads: int) -> None:
        self._threads = threads
        self._lock = threading.Lock()
        self._model: M | None = None

    @property
    def loaded(self) -> bool:
        """Whether the model is in memory."""
        return self._model is not None

    def dim(self) -> int:
        return self.width

    def close(self) -> None:
        """Drop the model from memory; the next `embed` loads it again."""
        with self._lock:
            self._model = None

    def _load(self) -> M:
        model = self._model
        if model is not None:
            return model
        with self._lock:
            if self._model is None:
                try:
                    self._model = self._open()
                except Exception as exc:  # missing package or file, unreadable model: all alike
                    raise EmbeddingMisconfigured(
                        f"{self.about} could not be loaded: {exc}"
                    ) from exc
            return self._model

    def _open(self) -> M:
        raise NotImplementedError


def l2_normalise(rows: np.ndarray, *, floor: float) -> np.ndarray:
    """`rows` scaled to unit L2 norm, leaving rows whose norm is <= `floor` as they are.

    Args:
        rows: (n, dim) float32 or float64.
        floor: rows at or below this norm are kept unscaled rather than blown up.

    Returns:
        (n, dim) float32, C-contiguous.
    """
    wide = rows.astype(np.float64, copy=False)
    norms = np.linalg.norm(wide, axis=1, keepdims=True)
    scale = np.where(norms > floor, norms, 1.0)
    return np.ascontiguousarray(wide / scale, dtype=np.float32)


def length_runs(
    lengths: Sequence[int], token_budget: int, max_rows: int | None = None
) -> list[list[int]]:
    """Group sequence positions into model runs of similar length, so little of a run is
    padding: a run's rows times its longest length stays within `token_budget` (a lone row
    may exceed it), and a run holds at most `max_rows` rows."""
    order = sorted(range(len(lengths)), key=lengths.__getitem__)
    runs: list[list[int]] = []
    current: list[int] = []
    for i in order:
        # Sorted ascending, so the newest sequence sets the run's padded length.
        full = (len(current) + 1) * lengths[i] > token_budget or len(current) == max_rows
        if current and full:
            runs.append(current)
            current = []
        current.append(i)
    if current:
        runs.append(current)
    return runs
