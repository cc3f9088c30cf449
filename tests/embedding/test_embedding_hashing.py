"""The hashing provider: deterministic, unit rows, overlap-sensitive, stable across processes."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from cpersona.embedding import EmbeddingProvider
from cpersona.embedding.hashing import HashingProvider

TEXTS = ["The user prefers dark roast coffee.", "", "   ", "!!!", "日本語のテキスト", "a"]


def test_hashing_rows_are_unit_float32() -> None:
    p = HashingProvider()
    assert isinstance(p, EmbeddingProvider)
    assert (p.name, p.available, p.dim()) == ("hashing:384", True, 384)
    out = p.embed(TEXTS)
    assert out.shape == (len(TEXTS), 384) and out.dtype == np.float32
    assert out.flags["C_CONTIGUOUS"]
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, rtol=1e-6)


def test_hashing_is_deterministic_and_batch_independent() -> None:
    p = HashingProvider()
    batch = p.embed(TEXTS)
    singles = np.vstack([p.embed([t]) for t in TEXTS])
    np.testing.assert_array_equal(batch, singles)
    np.testing.assert_array_equal(batch, HashingProvider().embed(TEXTS))
    np.testing.assert_array_equal(p.embed(TEXTS[:1], kind="query"), batch[:1])


def test_hashing_shared_words_are_similar() -> None:
    p = HashingProvider()
    base, near, inflected, far = p.embed(
        [
            "deploy the payments service on friday",
            "the payments service deploy is friday",
            "deployed payment services",
            "grandmother bakes apple pie",
        ]
    )
    assert base @ near > 0.8
    assert base @ inflected > base @ far + 0.2
    assert abs(base @ far) < 0.2


def test_hashing_is_case_insensitive() -> None:
    p = HashingProvider()
    a, b = p.embed(["Coffee Beans", "coffee beans"])
    np.testing.assert_array_equal(a, b)


def test_hashing_custom_width() -> None:
    p = HashingProvider(dim=7)
    assert p.name == "hashing:7" and p.embed(["x y z"]).shape == (1, 7)
    assert p.embed([]).shape == (0, 7)
    with pytest.raises(ValueError):
        HashingProvider(dim=0)


def test_hashing_is_stable_across_processes() -> None:
    # A different hash seed in the child catches any use of Python's salted hash().
    code = (
        "import sys; from cpersona.embedding.hashing import HashingProvider; "
        f"sys.stdout.buffer.write(HashingProvider().embed({TEXTS!r}).tobytes())"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    child = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, check=True)
    here = HashingProvider().embed(TEXTS)
    np.testing.assert_array_equal(np.frombuffer(child.stdout, dtype=np.float32), here.ravel())
