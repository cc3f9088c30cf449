"""What checking index content costs (issue 21 item 4).

- The scan with `sums` (every slot it scores checked against its content checksum) against the
  same scan without, over the same mapped file: the window scan (10,000 rows) and the far scan
  (200,000), 384 and 768 dimensions, Rust and numpy. The two are timed in turns (7 rounds of
  best-of-n), so both see the same background load; the minimum of each side and the median of
  the per-round ratios are recorded.
- The check of a new mapping (`checksums.content_problem`: every slot's checksum and the scan
  order), once per file per process, against the scan.
- The CRC of full-text records as a process loads them, against the core's own load.

Run: `python -m pytest benches/test_checksum_bench.py --benchmark-enable -s`
(docs/performance.md, "Checking index content").
"""

from __future__ import annotations

import statistics
import tempfile
import zlib
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
from bench_support import REACH, best_of, scan_region, time_region, unit_vectors, write_vector_file
from cpersona.fts.format import put_record
from cpersona.storage.fulltext import FtsRow
from cpersona.timerange import NO_TIME
from cpersona.vectors import checksums


@pytest.fixture(scope="module", params=[384, 768])
def dataset(request: pytest.FixtureRequest):
    dim = request.param
    vectors = unit_vectors(REACH, dim)
    query = vectors[12_345].copy()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.vec"
        write_vector_file(path, vectors, checksummed=True)
        yield dim, path, query


def _paired(plain, checked, repeats: int) -> dict[str, float]:
    mins_plain, mins_checked, ratios = [], [], []
    for turn in range(7):
        # Alternate which side goes first, so neither always runs on a warmer cache.
        if turn % 2:
            b, a = best_of(checked, repeats), best_of(plain, repeats)
        else:
            a, b = best_of(plain, repeats), best_of(checked, repeats)
        mins_plain.append(a)
        mins_checked.append(b)
        ratios.append(b / a)
    return {
        "plain_min_ms": round(min(mins_plain) * 1e3, 3),
        "checked_min_ms": round(min(mins_checked) * 1e3, 3),
        "median_ratio": round(statistics.median(ratios), 3),
    }


@pytest.mark.parametrize("region", ["window", "far"])
def test_checked_scan_cost(benchmark, kernels: ModuleType, dataset, region: str) -> None:
    dim, path, query = dataset
    index = kernels.VectorIndex.open(path)
    sums = checksums.open_read(path, index.capacity)
    repeats = 100 if region == "window" else 3

    def plain():
        return scan_region(index, query, region)

    def checked():
        return scan_region(index, query, region, sums=sums)

    assert [a.tolist() for a in plain()] == [a.tolist() for a in checked()]
    benchmark.group = f"checked {region} scan d={dim}"
    time_region(benchmark, region, checked)
    if benchmark.disabled:
        return
    found = _paired(plain, checked, repeats)
    benchmark.extra_info.update(found, backend=kernels.KERNEL)
    print(f"\n{region} scan d={dim} {kernels.KERNEL}: {found}")


def test_map_check_cost(benchmark, dataset) -> None:
    dim, path, _ = dataset
    sums = checksums.open_read(path, REACH)

    def check():
        return checksums.content_problem(path, dim, REACH, REACH, sums)

    assert check() == ""
    benchmark.group = f"check of a new mapping n={REACH} d={dim}"
    benchmark.pedantic(check, rounds=5, iterations=1, warmup_rounds=1)


def test_fts_load_crc_cost(benchmark) -> None:
    core_type = pytest.importorskip("cpersona._core").FtsIndex
    rng = np.random.default_rng(1)
    words = [f"w{i}" for i in range(5000)]
    data = b"".join(
        put_record(FtsRow(i, i, "a", "", "", None, (" ".join(rng.choice(words, 24)),), NO_TIME))
        for i in range(1, 100_001)
    )

    def load():
        core_type().apply(data)

    load_s, crc_s = best_of(load, 3), best_of(lambda: zlib.crc32(data), 5)
    benchmark.group = "fts load crc n=100000"
    benchmark.pedantic(lambda: zlib.crc32(data), rounds=5, iterations=1)
    benchmark.extra_info.update(
        bytes=len(data), load_ms=round(load_s * 1e3, 1), crc_ms=round(crc_s * 1e3, 2)
    )
    print(f"\nfts: {len(data)} bytes, load {load_s * 1e3:.1f} ms, crc {crc_s * 1e3:.2f} ms")
