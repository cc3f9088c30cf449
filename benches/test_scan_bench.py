"""Window and far scans: the Rust index, the numpy fallback, and the chunked BLOB-style scan.

Workloads (spec §4.2–4.3 defaults): a window of 10,000 rows, and REACH = 200,000 (a far region
of 190,000 rows), at 384 and 768 dimensions, k = 10. Datasets come from a fixed seed, are
written once per module as a vector file, and are checked against a float64 reference before
anything is timed.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
from bench_support import record
from cpersona.vectors.format import VectorFileWriter

WINDOW = 10_000
REACH = 200_000
K = 10
BLOB_CHUNK = 512  # CPERSONA_VECTOR_SCAN_CHUNK_ROWS default
META_BYTES = 8 * 4 + 1 + 4  # agent, project, channel, source, flags, order per row
NONE = np.empty(0, np.uint64)


@pytest.fixture(scope="module", params=[384, 768])
def dataset(request: pytest.FixtureRequest):
    dim = request.param
    rng = np.random.default_rng(dim)
    vectors = rng.standard_normal((REACH, dim), dtype=np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    query = vectors[12_345] + 0.1 * vectors[150_000]
    query = (query / np.linalg.norm(query)).astype(np.float32)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.vec"
        writer = VectorFileWriter.create(path, dim, REACH, bytes(16), 0)
        ones = np.ones(REACH, np.uint64)
        ids = np.arange(1, REACH + 1, dtype=np.int64)
        writer.extend(
            ids, ids, agent=ones, project=ones, channel=ones, source=ones, vectors=vectors
        )
        writer.close()
        # Scan order is newest (highest id) first, so the window is the last WINDOW rows.
        newest_first = vectors[::-1]
        yield dim, path, newest_first, query


def reference(rows: np.ndarray, query: np.ndarray, k: int, base: int) -> list[int]:
    scores = rows.astype(np.float64) @ query.astype(np.float64)
    best = np.lexsort((np.arange(scores.size), -scores))[:k]
    return (best + base).tolist()


def ids_to_positions(ids: np.ndarray) -> list[int]:
    return (REACH - ids).tolist()  # id REACH is position 0


def blob_scan(kernels: ModuleType, rows: np.ndarray, query: np.ndarray, base: int, k: int):
    """The no-index path: blocks of BLOB rows scored and merged, as vectors/search.py does."""
    pos_parts, score_parts = [], []
    for start in range(0, rows.shape[0], BLOB_CHUNK):
        p, s = kernels.scan_chunk(rows[start : start + BLOB_CHUNK], query, -1.0, k, base + start)
        pos_parts.append(p)
        score_parts.append(s)
    return kernels.merge_top_k(np.concatenate(pos_parts), np.concatenate(score_parts), k)


@pytest.mark.parametrize("threads", [1, 2])
def test_window_scan(benchmark, backend, dataset, threads, bandwidth_gbs) -> None:
    dim, path, rows, query = dataset
    if backend.KERNEL == "numpy" and threads != 1:
        pytest.skip("the numpy fallback scores on one thread")
    index = backend.VectorIndex.open(path)

    def run():
        return index.scan(query, 1, NONE, NONE, NONE, WINDOW, 0, -1.0, K, 0, threads=threads)

    near_ids = run()[0]
    correct = ids_to_positions(near_ids) == reference(rows[:WINDOW], query, K, 0)
    assert correct
    benchmark.group = f"window scan n={WINDOW} d={dim}"
    benchmark(run)
    record(
        benchmark,
        nbytes=WINDOW * (4 * dim + META_BYTES),
        bandwidth=bandwidth_gbs,
        backend=backend.KERNEL,
        path="index",
        threads=threads,
        correct=correct,
    )


@pytest.mark.parametrize("threads", [1, 2])
def test_far_scan(benchmark, backend, dataset, threads, bandwidth_gbs) -> None:
    dim, path, rows, query = dataset
    if backend.KERNEL == "numpy" and threads != 1:
        pytest.skip("the numpy fallback scores on one thread")
    index = backend.VectorIndex.open(path)

    def run():
        return index.scan(query, 1, NONE, NONE, NONE, WINDOW, REACH, -1.0, K, K, threads=threads)

    _, _, far_ids, _ = run()
    correct = ids_to_positions(far_ids) == reference(rows[WINDOW:], query, K, WINDOW)
    assert correct
    benchmark.group = f"far scan n={REACH} d={dim}"
    benchmark.pedantic(run, rounds=5, iterations=1, warmup_rounds=1)
    record(
        benchmark,
        nbytes=REACH * (4 * dim + META_BYTES),
        bandwidth=bandwidth_gbs,
        backend=backend.KERNEL,
        path="index",
        threads=threads,
        correct=correct,
    )


@pytest.mark.parametrize("region", ["window", "far"])
def test_blob_chunk_scan(benchmark, backend, dataset, region, bandwidth_gbs) -> None:
    dim, _, rows, query = dataset
    lo, hi = (0, WINDOW) if region == "window" else (WINDOW, REACH)
    block = np.ascontiguousarray(rows[lo:hi])

    window = np.ascontiguousarray(rows[:WINDOW])

    def run():
        if region == "window":
            return blob_scan(backend, block, query, lo, K)
        # As the index scan: the window's top k and the far region's, both scored.
        blob_scan(backend, window, query, 0, K)
        return blob_scan(backend, block, query, lo, K)

    correct = run()[0].tolist() == reference(block, query, K, lo)
    assert correct
    n = hi
    benchmark.group = f"{region} scan n={n} d={dim}"
    if region == "far":
        benchmark.pedantic(run, rounds=5, iterations=1, warmup_rounds=1)
    else:
        benchmark(run)
    record(
        benchmark,
        nbytes=n * 4 * dim,
        bandwidth=bandwidth_gbs,
        backend=backend.KERNEL,
        path=f"blob chunks of {BLOB_CHUNK}",
        threads=1,
        correct=correct,
    )
