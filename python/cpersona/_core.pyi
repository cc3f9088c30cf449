"""Stubs for the Rust extension `cpersona._core` (rust/py/); `_fallback` is its numpy twin.

No `__all__` here: a stub exports every public name it defines, and the extension's own
`__all__` is the list of what rust/py/ registers (pyo3 builds it), so a third copy could only
fall behind."""

import os
from collections.abc import Sequence
from typing import Any, final

import numpy as np
import numpy.typing as npt

__version__: str
DEBUG_BUILD: bool
KERNEL: str
DEFAULT_CHUNK_ROWS: int

_F32 = npt.NDArray[np.float32]
_F64 = npt.NDArray[np.float64]
_I64 = npt.NDArray[np.int64]
_U64 = npt.NDArray[np.uint64]

def scan_dot(rows: _F32, query: _F32) -> _F32:
    """rows (n, dim) float32, query (dim,) float32 -> (n,) float32 scores."""

def top_k(scores: _F32, k: int) -> tuple[_I64, _F32]:
    """Best k by (score desc in total order, position asc) -> (positions, scores)."""

def scan_chunk(
    rows: _F32, query: _F32, threshold: float, k: int, base_position: int
) -> tuple[_I64, _F32]:
    """Best k rows of a block with score >= threshold; positions offset by base_position."""

def merge_top_k(positions: _I64, scores: _F32, k: int) -> tuple[_I64, _F32]:
    """Best k of (positions[i], scores[i]) pairs."""

def rrf(
    rankings: Sequence[_I64],
    *,
    k: int = 60,
    weights: Sequence[float] | None = None,
    limit: int | None = None,
) -> tuple[_I64, _F64]:
    """Reciprocal-rank fusion -> (keys, scores) best first; a negative key only holds a rank."""

def rsf(
    rankings: Sequence[_I64], scores: Sequence[_F64], *, limit: int | None = None
) -> tuple[_I64, _F64]:
    """Relative-score fusion -> (keys, scores) best first; NaN scores are undefined."""

@final
class VectorIndex:
    """A validated, read-only mapping of one vector index file."""

    @staticmethod
    def open(path: str | os.PathLike[str]) -> VectorIndex: ...
    @property
    def dim(self) -> int: ...
    @property
    def capacity(self) -> int: ...
    @property
    def count(self) -> int: ...
    @property
    def live(self) -> int: ...
    @property
    def applied_seq(self) -> int: ...
    @property
    def dirty(self) -> int: ...
    @property
    def table(self) -> int: ...
    @property
    def db_uid(self) -> bytes: ...
    def scan(
        self,
        query: _F32,
        agent: int,
        projects: _U64,
        channels: _U64,
        sources: _U64,
        window: int,
        reach: int,
        threshold: float,
        k: int,
        far_k: int,
        chunk_rows: int = 4096,
        threads: int = 1,
        sums: npt.NDArray[np.uint32] | None = None,
        *,
        since: int | None = None,
        until: int | None = None,
    ) -> tuple[_I64, _F32, _I64, _F32]:
        """-> (near_ids, near_scores, far_ids, far_scores), each best first; `since`/`until`
        (microseconds) keep the rows whose instant is in [since, until)."""

class FtsIndex:
    """The in-memory full-text index of one table (docs/fts-index.md)."""

    def __init__(self) -> None: ...
    def apply(self, records: bytes) -> None:
        """Applies change records; raises StoreCorrupt (changing nothing) if they do not parse."""
    def search(
        self,
        terms: list[str],
        agent: int,
        projects: _U64,
        channels: _U64,
        sources: _U64,
        limit: int,
        *,
        since: int | None = None,
        until: int | None = None,
    ) -> tuple[_I64, _F64]:
        """-> (ids, bm25), by bm25 ascending then id ascending; `since`/`until` as in scan."""
    @property
    def live(self) -> int: ...
    @property
    def total_tokens(self) -> int: ...
    @property
    def slots(self) -> int: ...
    def clear_cache(self) -> None: ...
    def ids(self) -> _I64: ...
    def row(self, id: int) -> tuple[int, int, int, int, int, int, list[str]] | None: ...

def fts_fold(text: str) -> str:
    """`text` as the FTS5 trigram tokenizer sees it: folded, cut at its first NUL."""

@final
class Unigram:
    """SentencePiece unigram tokenizer over a model's own tables (rust/unigram.rs)."""

    def __init__(
        self,
        blob: bytes,
        offsets: npt.NDArray[np.uint32],
        scores: npt.NDArray[np.float32],
        unk_id: int,
        norm_cp: npt.NDArray[np.uint32],
        norm_off: npt.NDArray[np.uint32],
        norm_out: npt.NDArray[np.uint32],
    ) -> None: ...
    def normalize(self, text: str) -> str:
        """The normalised text the split runs over (spaces as U+2581)."""
    def encode(self, text: str) -> list[int]:
        """Piece ids of text, without start and end tokens."""

def layout() -> dict[str, dict[str, Any]]:
    """The file layouts this core reads (the vector file, the full-text change records), dtypes
    as numpy names them; `_fallback.layout()` gives the Python declarations in the same shape."""
