"""Surface parity: `_fallback` exports what `_core` does, with the same signatures and errors."""

from __future__ import annotations

import inspect
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
from cpersona import _backend, _fallback
from cpersona.config import Settings
from cpersona.embedding.hashing import HashingProvider
from cpersona.engine import Engine
from cpersona.errors import ConfigError

F32, I64, U64 = np.float32, np.int64, np.uint64

KERNEL_API = [
    "scan_dot",
    "top_k",
    "scan_chunk",
    "merge_top_k",
    "rrf",
    "rsf",
    "VectorIndex",
    "layout",
]
CONSTANTS = ["__version__", "DEBUG_BUILD", "KERNEL", "DEFAULT_CHUNK_ROWS"]
INDEX_PROPERTIES = ["dim", "capacity", "count", "live", "applied_seq", "dirty", "table", "db_uid"]


def public(module: ModuleType) -> set[str]:
    return {n for n in dir(module) if not n.startswith("_")} & set(KERNEL_API + CONSTANTS)


def params(fn) -> list[tuple[str, object, object]]:
    sig = inspect.signature(fn)
    return [(p.name, p.kind, p.default) for p in sig.parameters.values() if p.name != "self"]


def test_surface_names_match(rust_kernels: ModuleType) -> None:
    for name in KERNEL_API + CONSTANTS:
        assert hasattr(rust_kernels, name), name
        assert hasattr(_fallback, name), name
    assert public(rust_kernels) == public(_fallback)
    assert rust_kernels.DEFAULT_CHUNK_ROWS == _fallback.DEFAULT_CHUNK_ROWS
    assert isinstance(rust_kernels.KERNEL, str) and isinstance(rust_kernels.DEBUG_BUILD, bool)


@pytest.mark.parametrize(
    "name", ["scan_dot", "top_k", "scan_chunk", "merge_top_k", "rrf", "rsf", "layout"]
)
def test_function_signatures_match(rust_kernels: ModuleType, name: str) -> None:
    assert params(getattr(rust_kernels, name)) == params(getattr(_fallback, name))


def test_vector_index_surface_matches(rust_kernels: ModuleType) -> None:
    rust_ix, np_ix = rust_kernels.VectorIndex, _fallback.VectorIndex
    assert params(rust_ix.open) == params(np_ix.open)
    # pyo3 marks `self` positional-only; compare the rest.
    assert params(rust_ix.scan) == params(np_ix.scan)
    for prop in INDEX_PROPERTIES:
        assert isinstance(inspect.getattr_static(np_ix, prop), property), prop
        assert hasattr(rust_ix, prop), prop
    with pytest.raises(TypeError):
        rust_ix()
    with pytest.raises(TypeError):
        np_ix()


def rows(n=3, d=4, dtype=F32):
    return np.ones((n, d), dtype)


def q(d=4, dtype=F32):
    return np.ones(d, dtype)


BAD_CALLS = {
    "rows_float64": (lambda b: b.scan_dot(rows(dtype=np.float64), q()), TypeError),
    "rows_list": (lambda b: b.scan_dot([[1.0]], q(1)), TypeError),
    "rows_big_endian": (lambda b: b.scan_dot(rows(dtype=">f4"), q()), TypeError),
    "rows_1d": (lambda b: b.scan_dot(q(), q()), ValueError),
    "rows_fortran": (
        lambda b: b.scan_dot(np.asfortranarray(np.ones((4, 3), F32)), q(3)),
        ValueError,
    ),
    "rows_strided": (lambda b: b.scan_dot(rows(3, 8)[:, ::2], q()), ValueError),
    "rows_misaligned": (
        lambda b: b.scan_dot(
            np.frombuffer(bytearray(50), F32, count=12, offset=1).reshape(3, 4), q()
        ),
        ValueError,
    ),
    "dim_mismatch": (lambda b: b.scan_dot(rows(), q(5)), ValueError),
    "zero_width": (lambda b: b.scan_dot(np.ones((2, 0), F32), q(0)), ValueError),
    "top_k_negative": (lambda b: b.top_k(q(), -1), ValueError),
    "top_k_float_k": (lambda b: b.top_k(q(), 1.5), TypeError),
    "top_k_huge_k": (lambda b: b.top_k(q(), 2**63), OverflowError),
    "top_k_2d": (lambda b: b.top_k(rows(), 1), ValueError),
    "chunk_nan_threshold": (lambda b: b.scan_chunk(rows(), q(), float("nan"), 1, 0), ValueError),
    "chunk_str_threshold": (lambda b: b.scan_chunk(rows(), q(), "0.5", 1, 0), TypeError),
    "chunk_negative_base": (lambda b: b.scan_chunk(rows(), q(), 0.0, 1, -1), ValueError),
    "merge_lengths": (lambda b: b.merge_top_k(np.zeros(2, I64), q(3), 1), ValueError),
    "merge_negative": (lambda b: b.merge_top_k(np.array([-1], I64), q(1), 1), ValueError),
    "merge_int32": (lambda b: b.merge_top_k(np.zeros(1, np.int32), q(1), 1), TypeError),
    "rrf_str": (lambda b: b.rrf("abc"), TypeError),
    "rrf_int32": (lambda b: b.rrf([np.zeros(1, np.int32)]), TypeError),
    "rrf_k_zero": (lambda b: b.rrf([np.zeros(1, I64)], k=0), ValueError),
    "rrf_positional_k": (lambda b: b.rrf([np.zeros(1, I64)], 60), TypeError),
    "rsf_float32": (lambda b: b.rsf([np.zeros(1, I64)], [np.zeros(1, F32)]), TypeError),
}


@pytest.mark.parametrize("case", sorted(BAD_CALLS))
def test_bad_input_raises_same_type(rust_kernels: ModuleType, case: str) -> None:
    call, expected = BAD_CALLS[case]
    for kernels in (rust_kernels, _fallback):
        with pytest.raises(expected) as info:
            call(kernels)
        assert type(info.value) is expected, (kernels.__name__, info.value)


def test_scan_bad_arguments_raise_same_type(rust_kernels: ModuleType, tmp_path) -> None:
    from cpersona.vectors.format import VectorFileWriter

    path = tmp_path / "s.vec"
    VectorFileWriter.create(path, 4, 2, bytes(16), 0).close()
    empty = np.empty(0, U64)
    good = (q(), 1, empty, empty, empty, 10, 0, 0.0, 5, 5)
    cases = [
        ((q(dtype=np.float64), *good[1:]), {}, TypeError),
        ((*good[:1], -1, *good[2:]), {}, OverflowError),
        ((*good[:1], 2**64, *good[2:]), {}, OverflowError),
        ((*good[:2], np.empty(0, I64), *good[3:]), {}, TypeError),
        ((*good[:2], np.empty((0, 1), U64), *good[3:]), {}, ValueError),
        ((*good[:5], -1, *good[6:]), {}, ValueError),
        ((*good[:7], float("nan"), *good[8:]), {}, ValueError),
        (good, {"chunk_rows": 0}, ValueError),
        (good, {"threads": -1}, ValueError),
        ((q(5), *good[1:]), {}, ValueError),
    ]
    for args, kwargs, expected in cases:
        for kernels in (rust_kernels, _fallback):
            index = kernels.VectorIndex.open(path)
            with pytest.raises(expected) as info:
                index.scan(*args, **kwargs)
            assert type(info.value) is expected, (kernels.__name__, args, kwargs)


def test_backend_selection(monkeypatch: pytest.MonkeyPatch, rust_kernels: ModuleType) -> None:
    assert _backend.load("numpy") is _fallback
    assert _backend.load("rust") is rust_kernels
    assert _backend.load("auto") is rust_kernels  # built: auto is the extension
    assert [_backend.name_of(m) for m in (rust_kernels, _fallback)] == ["rust", "numpy"]
    with pytest.raises(ValueError, match="fortran"):
        _backend.load("fortran")
    # Code without an engine (benchmarks, child processes) reads CPERSONA_KERNEL when it asks.
    monkeypatch.setenv("CPERSONA_KERNEL", "numpy")
    assert _backend.from_environment() is _fallback
    monkeypatch.setenv("CPERSONA_KERNEL", "rust")
    assert _backend.from_environment() is rust_kernels


def test_engine_searches_with_the_kernels_its_settings_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kernel: str, kernels: ModuleType
) -> None:
    """The setting, not the environment, chooses: two engines of one process may differ."""
    monkeypatch.setenv("CPERSONA_KERNEL", "numpy" if kernel == "rust" else "rust")
    settings = Settings(db_path=str(tmp_path / "mem.db"), embedding_mode="hashing", kernel=kernel)
    engine = Engine(settings, embedder=HashingProvider())
    try:
        assert engine.recaller.kernels is kernels
        # The numpy twin has no full-text index: FTS5 answers the full-text arms there.
        assert bool(engine.services.fts) is (kernel == "rust")
    finally:
        engine.close()
    assert Settings.from_env({"CPERSONA_KERNEL": kernel}).kernel == kernel
    with pytest.raises(ConfigError, match="CPERSONA_KERNEL"):
        Settings.from_env({"CPERSONA_KERNEL": "fortran"})
