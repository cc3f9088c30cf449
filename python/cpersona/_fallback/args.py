"""The argument checks of the numpy twin, mirroring pyo3's extraction and rust/py/args.rs.

Checks run in two phases, as in the Rust core: first every argument's type (pyo3 extracts all
arguments before the function body runs: TypeError, OverflowError), then values and shapes
(the body: ValueError). So a call with several faults raises the same class on both backends.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

I64_MAX = 2**63 - 1
_U64_LIMIT = 2**64

F32 = np.dtype(np.float32)
F64 = np.dtype(np.float64)
I64 = np.dtype(np.int64)
U64 = np.dtype(np.uint64)

Array = npt.NDArray[Any]


def typed(arr: object, dtype: np.dtype[Any], name: str) -> Array:
    if not isinstance(arr, np.ndarray) or arr.dtype != dtype:
        raise TypeError(f"{name} must be a {dtype} numpy array")
    return arr


def shaped(arr: Array, name: str, ndim: int) -> Array:
    if arr.ndim != ndim:
        raise ValueError(f"{name} must be {ndim}-D, got {arr.ndim} dimensions")
    if not arr.flags.c_contiguous:
        raise ValueError(f"{name} must be C-contiguous")
    if not arr.flags.aligned:  # Rust cannot view a misaligned buffer as a slice
        raise ValueError(f"{name} must be aligned")
    return arr


def typed_list(values: object, dtype: np.dtype[Any], name: str) -> list[Array]:
    if isinstance(values, str | bytes) or not isinstance(values, Sequence | np.ndarray):
        raise TypeError(f"{name} must be a sequence of {dtype} arrays")
    return [typed(v, dtype, f"{name}[i]") for v in values]


def as_int(value: object, name: str) -> int:
    try:
        number = operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        raise TypeError(f"{name} must be an int") from None
    if not -(2**63) <= number <= I64_MAX:
        raise OverflowError(f"{name} does not fit in int64")
    return number


def non_negative(number: int, name: str) -> int:
    if number < 0:
        raise ValueError(f"{name} must be >= 0, got {number}")
    return number


def as_u64(value: object, name: str) -> int:
    try:
        number = operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        raise TypeError(f"{name} must be an int") from None
    if not 0 <= number < _U64_LIMIT:
        raise OverflowError(f"{name} does not fit in uint64")
    return number


def as_float(value: object, name: str) -> float:
    if isinstance(value, str | bytes | bytearray) or value is None:
        raise TypeError(f"{name} must be a float")
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a float") from None


def check_threshold(value: float) -> float:
    if math.isnan(value):
        raise ValueError("threshold must not be NaN")
    return value


def time_range(since: object, until: object) -> tuple[int, int] | None:
    """``[lo, hi)`` of a time-scoped scan, None when neither bound is given (rust/py/args.rs)."""
    if since is None and until is None:
        return None
    # i64::MIN marks a row without an instant: a bounded range never admits it.
    lo = -I64_MAX if since is None else max(as_int(since, "since"), -I64_MAX)
    hi = I64_MAX if until is None else as_int(until, "until")
    if hi < lo:
        raise ValueError(f"until ({hi}) is before since ({lo})")
    return lo, hi


def concat(parts: list[Array], dtype: type) -> Array:
    return np.concatenate(parts) if parts else np.empty(0, dtype)
