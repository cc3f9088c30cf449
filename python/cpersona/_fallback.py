"""The numpy twin of `cpersona._core`: same names, signatures, exceptions and tie-break."""

from __future__ import annotations

import numpy as np

KERNEL = "numpy"
DEBUG_BUILD = False
__version__ = "numpy"


def scan_dot(rows: np.ndarray, query: np.ndarray) -> np.ndarray:
    """Dot product of every row with the query.

    Args:
        rows: (n, dim) float32, C-contiguous.
        query: (dim,) float32.

    Returns:
        (n,) float32 scores.
    """
    _check_f32(rows, "rows", 2)
    _check_f32(query, "query", 1)
    if query.shape[0] != rows.shape[1]:
        raise ValueError(
            f"dimension mismatch: expected {rows.shape[1]}, got {query.shape[0]}"
        )
    return (rows @ query).astype(np.float32, copy=False)


def _check_f32(arr: np.ndarray, name: str, ndim: int) -> None:
    if not isinstance(arr, np.ndarray) or arr.dtype != np.float32:
        raise TypeError(f"{name} must be a float32 numpy array")
    if arr.ndim != ndim:
        raise ValueError(f"{name} must have {ndim} dimension(s), got {arr.ndim}")
