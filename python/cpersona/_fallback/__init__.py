"""The numpy twin of `cpersona._core`: same names, signatures, defaults, dtypes and exceptions.

One module per binding module of rust/py/: `kernels` (scan_dot, top_k, scan_chunk,
merge_top_k), `fusion` (rrf, rsf), `vectors` (VectorIndex), `tokenizer` (Unigram) and `layout`
(layout), with `args` holding the argument checks they share. This package is the facade the
rest of the code imports (through `cpersona._backend`).

Everything here must answer exactly as the Rust core does, tie-breaks included:

- Top k is taken under one total order: score descending as ``f32::total_cmp`` orders it
  (``+0.0`` above ``-0.0``, a positive NaN above ``+inf``), then position ascending.
- A row's score is the same whatever block it is scored in. ``rows @ query`` does not promise
  that (BLAS sums a row differently depending on the rows around it), so rows are scored with
  ``einsum``, which sums each row on its own. Scores agree with Rust to float32 rounding, and
  bit for bit when the dot products are exact (small-integer vectors).
- Fusion sums each candidate's terms largest first in float64, as the Rust core does, so fused
  scores are identical bits.
- Arrays must already have the documented dtype (``TypeError``) and be C-contiguous with the
  documented number of dimensions (``ValueError``); nothing is converted silently.

One exception: the full-text index (`_core.FtsIndex`, `_core.fts_fold`) has no twin here. Its
fallback is the FTS5 statement it reproduces (docs/fts-index.md), which the pipeline runs
whenever the core is absent.
"""

from __future__ import annotations

from cpersona._fallback.fusion import rrf, rsf
from cpersona._fallback.kernels import merge_top_k, scan_chunk, scan_dot, top_k
from cpersona._fallback.layout import layout
from cpersona._fallback.tokenizer import Unigram
from cpersona._fallback.vectors import VectorIndex

KERNEL = "numpy"
DEBUG_BUILD = False
__version__ = "numpy"
DEFAULT_CHUNK_ROWS = 4096

__all__ = [
    "DEBUG_BUILD",
    "DEFAULT_CHUNK_ROWS",
    "KERNEL",
    "Unigram",
    "VectorIndex",
    "__version__",
    "layout",
    "merge_top_k",
    "rrf",
    "rsf",
    "scan_chunk",
    "scan_dot",
    "top_k",
]
