"""scan_dot, top_k, scan_chunk and merge_top_k on both backends, against float64 references."""

from __future__ import annotations

from types import ModuleType

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from kernel_oracle import dot64, ranked, total_key

DIMS = [1, 3, 7, 15, 16, 17, 31, 33, 63, 65, 97, 384, 768]


def int_rows(n: int, dim: int) -> st.SearchStrategy[np.ndarray]:
    """Small-integer rows: every dot product is exact in float32, so backends agree bit for bit."""
    return hnp.arrays(np.float32, (n, dim), elements=st.integers(-3, 3).map(float))


def float_rows(n: int, dim: int) -> st.SearchStrategy[np.ndarray]:
    return hnp.arrays(
        np.float32, (n, dim), elements=st.floats(-1, 1, width=32, allow_subnormal=False)
    )


@st.composite
def block(draw: st.DrawFn, integer: bool) -> tuple[np.ndarray, np.ndarray]:
    dim = draw(st.sampled_from(DIMS))
    n = draw(st.integers(0, 40))
    rows_of = int_rows if integer else float_rows
    rows = draw(rows_of(n, dim))
    query = draw(rows_of(1, dim))[0]
    if n and draw(st.booleans()):  # duplicate rows (ties) and an all-zero row
        rows[n // 2] = rows[0]
        rows[-1] = 0.0
    return rows, query


def assert_close_to_reference(scores: np.ndarray, rows: np.ndarray, query: np.ndarray) -> None:
    exact = dot64(rows, query)
    bound = np.abs(rows.astype(np.float64)) @ np.abs(query.astype(np.float64))
    assert scores.dtype == np.float32
    np.testing.assert_array_less(np.abs(scores - exact), 1e-5 * bound + 1e-6)


@given(block(integer=False))
def test_scan_dot_matches_float64_reference(kernels: ModuleType, data) -> None:
    rows, query = data
    assert_close_to_reference(kernels.scan_dot(rows, query), rows, query)


@given(block(integer=True))
def test_scan_dot_integer_vectors_are_exact_on_both_backends(
    rust_kernels: ModuleType, numpy_kernels: ModuleType, data
) -> None:
    rows, query = data
    exact = dot64(rows, query).astype(np.float32)
    for kernels in (rust_kernels, numpy_kernels):
        got = kernels.scan_dot(rows, query)
        assert got.tobytes() == exact.tobytes()  # +0.0, never -0.0, for zero sums


def test_scan_dot_zero_vectors_score_positive_zero(kernels: ModuleType) -> None:
    rows = np.zeros((3, 17), np.float32)
    query = -np.arange(17, dtype=np.float32)
    assert kernels.scan_dot(rows, query).tobytes() == np.zeros(3, np.float32).tobytes()


score_values = st.sampled_from(
    [0.0, -0.0, 1.0, -1.0, 0.5, 2.0, np.inf, -np.inf, np.nan, -np.nan]
) | st.floats(-4, 4, width=32)


@given(st.lists(score_values, max_size=60), st.data())
def test_top_k_matches_sorted_reference(kernels: ModuleType, values, data) -> None:
    scores = np.array(values, np.float32)
    n = len(values)
    k = data.draw(st.sampled_from(sorted({0, 1, max(n - 1, 0), n, n + 1})))
    positions, got = kernels.top_k(scores, k)
    want = ranked([float(s) for s in scores], list(range(n)), k)
    assert positions.dtype == np.int64 and got.dtype == np.float32
    assert positions.tolist() == [p for p, _ in want]
    assert got.tobytes() == np.array([s for _, s in want], np.float32).tobytes()


def test_top_k_orders_nan_and_signed_zero_like_total_cmp(kernels: ModuleType) -> None:
    scores = np.array([0.5, 1.0, 0.5, np.nan, -0.0, 0.0, -np.inf], np.float32)
    positions, _ = kernels.top_k(scores, 7)
    assert positions.tolist() == [3, 1, 0, 2, 5, 4, 6]
    assert total_key(-0.0) < total_key(0.0)


@st.composite
def streamed(draw: st.DrawFn, integer: bool):
    dim = draw(st.sampled_from(DIMS))
    chunk = draw(st.integers(1, 9))
    # Row counts at the chunk boundaries (memchr-style): chunk ± 1 and multiples.
    n = draw(st.sampled_from([0, 1, chunk - 1, chunk, chunk + 1, 2 * chunk, 3 * chunk + 1]))
    rows_of = int_rows if integer else float_rows
    rows = draw(rows_of(max(n, 0), dim))
    query = draw(rows_of(1, dim))[0]
    k = draw(st.sampled_from(sorted({1, max(n - 1, 1), max(n, 1), n + 1})))
    threshold = draw(st.sampled_from([-1e30, -1.0, 0.0, 1.0]))
    return rows, query, chunk, k, threshold


def stream(kernels: ModuleType, rows, query, chunk, k, threshold, base=0):
    """A window scored in blocks of `chunk` rows and merged, as the no-index path does."""
    parts = [
        kernels.scan_chunk(rows[i : i + chunk], query, threshold, k, base + i)
        for i in range(0, rows.shape[0], chunk)
    ]
    if not parts:
        return np.empty(0, np.int64), np.empty(0, np.float32)
    return kernels.merge_top_k(
        np.concatenate([p for p, _ in parts]), np.concatenate([s for _, s in parts]), k
    )


@given(streamed(integer=True))
def test_scan_chunk_integer_vectors_match_reference_for_any_chunking(
    rust_kernels: ModuleType, numpy_kernels: ModuleType, case
) -> None:
    rows, query, chunk, k, threshold = case
    exact = dot64(rows, query)
    keep = [i for i in range(rows.shape[0]) if exact[i] >= threshold]
    want = ranked([float(exact[i]) for i in keep], keep, k)
    want_pos = [p + 7 for p, _ in want]
    want_scores = np.array([s for _, s in want], np.float32).tobytes()
    for kernels in (rust_kernels, numpy_kernels):
        for c in (chunk, max(rows.shape[0], 1)):
            positions, scores = stream(kernels, rows, query, c, k, threshold, base=7)
            assert positions.tolist() == want_pos
            assert scores.tobytes() == want_scores


@given(streamed(integer=False))
def test_scan_chunk_float_vectors_give_a_valid_top_k(kernels: ModuleType, case) -> None:
    rows, query, chunk, k, threshold = case
    single = kernels.scan_chunk(rows, query, threshold, k, 0)
    chunked = stream(kernels, rows, query, chunk, k, threshold)
    # Same backend, same per-row score: chunking changes nothing, bit for bit.
    assert single[0].tolist() == chunked[0].tolist()
    assert single[1].tobytes() == chunked[1].tobytes()
    exact = dot64(rows, query)
    bound = np.abs(rows.astype(np.float64)) @ np.abs(query.astype(np.float64))
    tol = 1e-5 * bound + 1e-6
    positions, scores = single
    np.testing.assert_array_less(np.abs(scores - exact[positions]), tol[positions] + 1e-12)
    # Every returned row is a top-k row of the reference up to the tolerance.
    candidates = exact >= threshold - tol
    if positions.size:
        worst = scores.min()
        left_out = np.setdiff1d(np.flatnonzero(candidates), positions)
        assert np.all(exact[left_out] <= worst + 2 * tol[left_out] + 1e-12) or len(positions) < k


@given(block(integer=False), st.integers(0, 45), st.sampled_from([-1e30, -0.2, 0.0, 0.3]))
def test_scan_chunk_scores_each_row_as_scan_dot_does(
    kernels: ModuleType, data, k, threshold
) -> None:
    """The block scan (the Rust one scores four rows per pass, then the rest one by one) keeps
    exactly the rows and scores that scoring each row alone and ranking gives, bit for bit."""
    rows, query = data
    scores = kernels.scan_dot(rows, query)
    keep = [i for i in range(rows.shape[0]) if float(scores[i]) >= threshold]
    want = ranked([float(scores[i]) for i in keep], keep, k)
    positions, got = kernels.scan_chunk(rows, query, threshold, k, 0)
    assert positions.tolist() == [p for p, _ in want]
    assert got.tobytes() == scores[positions].tobytes()


def test_scan_chunk_threshold_compares_the_widened_score(kernels: ModuleType) -> None:
    # 0.3 as float32 is 0.30000001192...; the float64 threshold 0.3 is below it.
    rows = np.array([[0.3]], np.float32)
    one = np.ones(1, np.float32)
    assert kernels.scan_chunk(rows, one, 0.3, 1, 0)[0].tolist() == [0]
    assert kernels.scan_chunk(rows, one, 0.30000002, 1, 0)[0].tolist() == []


@settings(max_examples=20)
@given(block(integer=True), st.integers(0, 50))
def test_merge_top_k_is_top_k_of_the_union(
    rust_kernels: ModuleType, numpy_kernels: ModuleType, data, k
) -> None:
    rows, query = data
    scores = dot64(rows, query).astype(np.float32)
    positions = np.arange(scores.shape[0], dtype=np.int64)[::-1].copy()
    want = ranked([float(s) for s in scores], positions.tolist(), k)
    for kernels in (rust_kernels, numpy_kernels):
        got_pos, got_scores = kernels.merge_top_k(positions, scores, k)
        assert got_pos.tolist() == [p for p, _ in want]
        assert got_scores.tolist() == [s for _, s in want]


@pytest.mark.parametrize("dim", [1, 7, 384])
def test_scan_chunk_is_independent_of_buffer_offset(kernels: ModuleType, dim: int) -> None:
    rng = np.random.default_rng(dim)
    rows = rng.standard_normal((50, dim)).astype(np.float32)
    query = rng.standard_normal(dim).astype(np.float32)
    raw = bytearray(b"\0\0\0\0" + rows.tobytes())
    shifted = np.frombuffer(raw, dtype=np.float32, offset=4).reshape(50, dim)
    a = kernels.scan_chunk(rows, query, -1e30, 50, 0)
    b = kernels.scan_chunk(shifted, query, -1e30, 50, 0)
    assert a[0].tolist() == b[0].tolist() and a[1].tobytes() == b[1].tobytes()
