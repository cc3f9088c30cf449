"""rrf and rsf (spec/retrieval.md §5) on both backends, against exact references."""

from __future__ import annotations

import itertools
from fractions import Fraction
from types import ModuleType

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st
from kernel_oracle import rrf_exact

I64 = np.int64


def arrays(lists: list[list[int]]) -> list[np.ndarray]:
    return [np.array(x, I64) for x in lists]


rankings_strategy = st.lists(st.lists(st.integers(-1, 25), max_size=20), max_size=5)


@given(rankings_strategy, st.integers(1, 100), st.none() | st.integers(0, 30))
def test_rrf_matches_exact_reference(kernels: ModuleType, rankings, k, limit) -> None:
    order, exact = rrf_exact(rankings, k)
    keys, scores = kernels.rrf(arrays(rankings), k=k, limit=limit)
    assert keys.dtype == np.int64 and scores.dtype == np.float64
    values = sorted(set(exact.values()))
    # Distinct exact scores must be far apart for float64 to keep their order.
    assume(all(b - a > Fraction(1, 10**12) for a, b in itertools.pairwise(values)))
    # Exact ties keep first insertion, unless float64 sums of the tied terms round apart (1/15 +
    # 1/10 against 1/6): then the kernel's own float scores, checked close to exact below, decide.
    full_keys, full_scores = kernels.rrf(arrays(rankings), k=k, limit=None)
    floats = dict(zip(full_keys.tolist(), full_scores.tolist(), strict=True))
    want = sorted(order, key=lambda key: (-exact[key], -floats[key]))  # stable: then insertion
    if limit is not None:
        want = want[:limit]
    assert keys.tolist() == want
    np.testing.assert_allclose(scores, [float(exact[key]) for key in want], rtol=1e-14)


def test_rrf_spec_example(kernels: ModuleType) -> None:
    keys, scores = kernels.rrf(arrays([[2], [2], [1]]))  # 2 is first in two lists, 1 in one
    assert keys.tolist() == [2, 1]
    assert scores[1] == pytest.approx(0.016393, abs=1e-6)
    assert scores[0] == pytest.approx(0.032787, abs=1e-6)


def test_rrf_excluded_row_consumes_its_rank(kernels: ModuleType) -> None:
    keys, scores = kernels.rrf(arrays([[-1, 7]]), k=60)
    assert keys.tolist() == [7] and scores.tolist() == [1 / 62]


def test_rrf_weights_and_ties(kernels: ModuleType) -> None:
    keys, scores = kernels.rrf(arrays([[5], [3]]), weights=[1.0, 2.0])
    assert keys.tolist() == [3, 5] and scores.tolist() == [2 / 61, 1 / 61]
    keys, _ = kernels.rrf(arrays([[5], [3]]), weights=[1.0, 1.0])
    assert keys.tolist() == [5, 3]  # equal scores: first insertion wins


@given(st.lists(st.lists(st.integers(0, 15), max_size=12), min_size=1, max_size=4), st.data())
def test_rrf_equal_weights_is_independent_of_list_order(kernels: ModuleType, rankings, data):
    shuffled = data.draw(st.permutations(rankings))
    a = dict(zip(*[x.tolist() for x in kernels.rrf(arrays(rankings))], strict=True))
    b = dict(zip(*[x.tolist() for x in kernels.rrf(arrays(shuffled))], strict=True))
    assert a == b  # same keys, bit-identical scores


@given(
    rankings_strategy,
    st.integers(1, 80),
    st.lists(st.floats(0, 3, allow_nan=False), min_size=5, max_size=5),
)
def test_rrf_backends_are_bit_identical(rust_kernels, numpy_kernels, rankings, k, weights) -> None:
    w = weights[: len(rankings)]
    a = rust_kernels.rrf(arrays(rankings), k=k, weights=w)
    b = numpy_kernels.rrf(arrays(rankings), k=k, weights=w)
    assert a[0].tolist() == b[0].tolist() and a[1].tobytes() == b[1].tobytes()


def rsf_reference(rankings: list[list[int]], scores: list[list[float]]):
    """§5.4 read literally (float64, summing in channel order), with its insertion order."""
    order: list[int] = []
    total: dict[int, float] = {}
    active = 0
    for keys, raw in zip(rankings, scores, strict=True):
        if not keys:
            continue
        active += 1
        defined = [s for s in raw if not np.isnan(s)]
        lo, hi = (min(defined), max(defined)) if defined else (0.0, 0.0)
        members = [(key, s) for key, s in zip(keys, raw, strict=True) if not np.isnan(s)]
        members += [(key, s) for key, s in zip(keys, raw, strict=True) if np.isnan(s)]
        for key, s in members:
            if np.isnan(s):
                term = 0.0 if defined else 1.0
            else:
                term = 1.0 if hi == lo else (s - lo) / (hi - lo)
            if key not in total:
                order.append(key)
                total[key] = 0.0
            total[key] += term
    n = max(active, 1)
    return order, {key: v / n for key, v in total.items()}


channel = st.lists(
    st.tuples(st.integers(0, 20), st.sampled_from([np.nan, 0.0, 0.5, 1.0]) | st.floats(-5, 5)),
    max_size=12,
)


@given(st.lists(channel, max_size=4), st.none() | st.integers(0, 10))
def test_rsf_matches_reference(kernels: ModuleType, channels, limit) -> None:
    rankings = [[key for key, _ in c] for c in channels]
    raw = [[s for _, s in c] for c in channels]
    order, score = rsf_reference(rankings, raw)
    values = sorted(set(score.values()))
    assume(all(b - a > 1e-9 for a, b in itertools.pairwise(values)))
    keys, got = kernels.rsf(arrays(rankings), [np.array(s, np.float64) for s in raw], limit=limit)
    want = sorted(order, key=lambda key: -score[key])
    if limit is not None:
        want = want[:limit]
    assert keys.tolist() == want
    np.testing.assert_allclose(got, [score[key] for key in want], rtol=1e-12, atol=1e-15)


@given(st.lists(channel, max_size=4))
def test_rsf_backends_are_bit_identical(rust_kernels, numpy_kernels, channels) -> None:
    rankings = arrays([[key for key, _ in c] for c in channels])
    raw = [np.array([s for _, s in c], np.float64) for c in channels]
    a, b = rust_kernels.rsf(rankings, raw), numpy_kernels.rsf(rankings, raw)
    assert a[0].tolist() == b[0].tolist() and a[1].tobytes() == b[1].tobytes()


def test_rsf_far_channel_lowers_every_score(kernels: ModuleType) -> None:
    v = np.array([1, 2], I64), np.array([0.9, 0.5])
    m = np.array([3], I64), np.array([2.0])
    far = np.array([4], I64), np.array([0.4])
    empty = np.empty(0, I64), np.empty(0)
    keys3, s3 = kernels.rsf([v[0], empty[0], m[0]], [v[1], empty[1], m[1]])
    keys4, s4 = kernels.rsf([v[0], far[0], m[0]], [v[1], far[1], m[1]])
    assert keys3.tolist() == [1, 3, 2] and s3.tolist() == [0.5, 0.5, 0.0]
    assert keys4.tolist() == [1, 4, 3, 2] and s4.tolist() == [1 / 3, 1 / 3, 1 / 3, 0.0]


def test_rsf_undefined_scores(kernels: ModuleType) -> None:
    keys, scores = kernels.rsf([np.array([8, 9], I64)], [np.array([np.nan, np.nan])])
    assert (keys.tolist(), scores.tolist()) == ([8, 9], [1.0, 1.0])
    keys, scores = kernels.rsf([np.array([8, 9], I64)], [np.array([np.nan, 2.0])])
    assert (keys.tolist(), scores.tolist()) == ([9, 8], [1.0, 0.0])


@pytest.mark.parametrize(
    "call",
    [
        lambda b: b.rrf([np.array([1], I64)], k=0),
        lambda b: b.rrf([np.array([1], I64)], weights=[1.0, 2.0]),
        lambda b: b.rrf([np.array([1], I64)], weights=[float("nan")]),
        lambda b: b.rrf([np.array([1], I64)], weights=[-1.0]),
        lambda b: b.rrf([np.array([1], I64)], limit=-1),
        lambda b: b.rsf([np.array([1], I64)], [np.array([np.inf])]),
        lambda b: b.rsf([np.array([-1], I64)], [np.array([1.0])]),
        lambda b: b.rsf([np.array([1], I64)], []),
        lambda b: b.rsf([np.array([1, 2], I64)], [np.array([1.0])]),
    ],
)
def test_fusion_rejects_bad_arguments(kernels: ModuleType, call) -> None:
    with pytest.raises(ValueError):
        call(kernels)
