"""Helpers shared by the benchmarks: the bandwidth probe, the extra_info recorder, best-of-n
timing, the scan benchmarks' unit-vector dataset and workload, and a timed MCP tool call."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from mcp import Client

#: Bytes summed by the bandwidth probe: far larger than the last-level cache (32 MiB here).
PROBE_BYTES = 1 << 30


def measure_bandwidth(nbytes: int = PROBE_BYTES, repeats: int = 5) -> float:
    """Best-of-n GB/s of ``np.sum`` over a float32 array: the machine's read-bandwidth floor."""
    data = np.ones(nbytes // 4, np.float32)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        data.sum()
        best = min(best, time.perf_counter() - start)
    return nbytes / best / 1e9


def record(benchmark, *, nbytes: int, bandwidth: float, **info: object) -> None:
    """Puts GB/s and the ratio to the bandwidth floor into ``extra_info`` (after timing)."""
    benchmark.extra_info.update(info)
    benchmark.extra_info["bytes"] = nbytes
    benchmark.extra_info["bandwidth_gbs"] = round(bandwidth, 2)
    stats = getattr(benchmark, "stats", None)
    if stats is None:  # --benchmark-disable: nothing was timed
        return
    seconds = stats.stats.min
    floor = nbytes / (bandwidth * 1e9)
    benchmark.extra_info["gbs"] = round(nbytes / seconds / 1e9, 2)
    benchmark.extra_info["floor_ms"] = round(floor * 1e3, 3)
    benchmark.extra_info["ratio_to_floor"] = round(seconds / floor, 2)


def unit_vectors(n: int, dim: int) -> np.ndarray:
    """`n` random float32 unit rows of `dim` dimensions, seeded by `dim` (the same each run)."""
    rng = np.random.default_rng(dim)
    vectors = rng.standard_normal((n, dim), dtype=np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors


def write_vector_file(path: Path, vectors: np.ndarray, *, checksummed: bool = False) -> None:
    """A vector file of `vectors` with ids 1..n and one agent, project, channel and source;
    `checksummed` adds the content checksums (vectors/checksums.py)."""
    from cpersona.vectors import checksums
    from cpersona.vectors.format import VectorFileWriter

    n, dim = vectors.shape
    writer = VectorFileWriter.create(path, dim, n, bytes(16), 0)
    ones = np.ones(n, np.uint64)
    ids = np.arange(1, n + 1, dtype=np.int64)
    writer.extend(ids, ids, agent=ones, project=ones, channel=ones, source=ones, vectors=vectors)
    if checksummed:
        checksums.write(writer)
    writer.close()


#: The scan benchmarks' workload (spec §4.2-4.3 defaults): a window of WINDOW rows, and a far
#: region reaching to row REACH, k = K in each.
WINDOW = 10_000
REACH = 200_000
K = 10
NONE = np.empty(0, np.uint64)  # no project, channel or source filter


def scan_region(index: Any, query: np.ndarray, region: str, **options: Any) -> Any:
    """`index.scan` for agent 1 without filters: the window alone, or (region "far") the window
    and the far region up to REACH; `options` go to the scan (`threads`, `sums`)."""
    reach, far_k = (0, 0) if region == "window" else (REACH, K)
    return index.scan(query, 1, NONE, NONE, NONE, WINDOW, reach, -1.0, K, far_k, **options)


def time_region(benchmark: Any, region: str, run: Callable[[], object]) -> None:
    """Times `run`, a scan of `region`: a far scan is slow enough that five rounds are timed,
    not as many as fit in pytest-benchmark's default budget."""
    if region == "far":
        benchmark.pedantic(run, rounds=5, iterations=1, warmup_rounds=1)
    else:
        benchmark(run)


def best_of(run: Callable[[], object], repeats: int) -> float:
    """The fastest of `repeats` calls of `run`, in seconds."""
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - start)
    return best


async def timed_tool_call(
    client: Client, name: str, args: dict[str, Any]
) -> tuple[float, dict[str, Any]]:
    """Milliseconds one tool call took, and its answer; a failed store or recall raises."""
    started = time.perf_counter()
    result = await client.call_tool(name, args)
    spent = (time.perf_counter() - started) * 1000
    payload = json.loads(result.content[0].text)
    if result.is_error or ("result" not in payload and "messages" not in payload):
        raise RuntimeError(f"{name} failed: {payload}")
    return spent, payload


def index_files_current(engine: Any) -> float:
    """Bring every index file of `engine` (vector and full-text, both tables) current, waiting
    for any rebuild, so that what is timed next reads built files and not the database's
    fallback; seconds taken."""
    started = time.perf_counter()
    for index in [*engine.indexes.values(), *engine.fts.values()]:
        while not index.sync():
            index.wait_for_healing()
    return time.perf_counter() - started
