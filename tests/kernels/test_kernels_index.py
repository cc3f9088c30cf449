"""VectorIndex on both backends: the scoped window / far scan, the header, and corrupt files."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
from cpersona.derived.scope import scope_hash
from cpersona.errors import StoreCorrupt
from cpersona.vectors.format import (
    HEADER_LEN,
    Layout,
    VectorFileWriter,
)
from hypothesis import given, settings
from hypothesis import strategies as st
from kernel_oracle import ScanSpec, SlotSpec, scan_oracle

UID = bytes(range(16))
NONE = np.empty(0, np.uint64)


def write(path: Path, dim: int, slots: list[SlotSpec], capacity: int | None = None) -> Path:
    """Writes `slots` in the given (arbitrary) order; the writer keeps `order` sorted."""
    writer = VectorFileWriter.create(path, dim, capacity or len(slots), UID, 0)
    for s in slots:
        append(writer, s)
    writer.close()
    return path


def append(writer: VectorFileWriter, s: SlotSpec) -> int:
    """Appends slot `s` (a foreign one with a vector one wider than its own); returns its slot."""
    vector = np.zeros(s.vector.size + 1, np.float32) if s.foreign else s.vector
    slot = writer.append(s.id, s.key, vector=vector, **s.scope)
    if s.deleted:
        writer.set_deleted(slot)
    return slot


def run_scan(index, query: np.ndarray, spec: ScanSpec, **kw):
    return index.scan(
        query,
        spec.agent,
        np.array(spec.projects, np.uint64),
        np.array(spec.channels, np.uint64),
        np.array(spec.sources, np.uint64),
        spec.window,
        spec.reach,
        spec.threshold,
        spec.k,
        spec.far_k,
        **kw,
    )


def as_lists(result) -> tuple[list[int], list[float], list[int], list[float]]:
    near_ids, near_scores, far_ids, far_scores = result
    assert near_ids.dtype == far_ids.dtype == np.int64
    assert near_scores.dtype == far_scores.dtype == np.float32
    return near_ids.tolist(), near_scores.tolist(), far_ids.tolist(), far_scores.tolist()


@st.composite
def corpus(draw: st.DrawFn):
    dim = draw(st.sampled_from([1, 3, 7, 17, 33]))
    n = draw(st.integers(0, 80))
    slots = []
    for i in range(n):
        kind = draw(st.integers(0, 9))
        slots.append(
            SlotSpec(
                id=i + 1,
                # Few distinct keys: many rows share a created_at second (id DESC breaks it).
                key=draw(st.integers(0, 12)),
                agent=draw(st.sampled_from([11, 12])),
                project=draw(st.sampled_from([21, 22, 23])),
                channel=draw(st.sampled_from([31, 32])),
                source=draw(st.sampled_from([0, 41, 42])),
                vector=np.array(
                    draw(st.lists(st.integers(-3, 3), min_size=dim, max_size=dim)), np.float32
                ),
                deleted=kind == 0,
                foreign=kind == 1,
            )
        )
    spec = ScanSpec(
        agent=draw(st.sampled_from([11, 12])),
        projects=tuple(draw(st.lists(st.sampled_from([21, 22, 23]), max_size=2))),
        channels=tuple(draw(st.lists(st.sampled_from([31, 32]), max_size=1))),
        sources=tuple(draw(st.lists(st.sampled_from([41, 42]), max_size=1))),
        window=draw(st.integers(0, 40)),
        reach=draw(st.integers(0, 80)),
        threshold=draw(st.sampled_from([-1e30, -2.0, 0.0, 3.0])),
        k=draw(st.integers(0, 15)),
        far_k=draw(st.integers(0, 15)),
    )
    query = np.array(draw(st.lists(st.integers(-3, 3), min_size=dim, max_size=dim)), np.float32)
    return dim, slots, spec, query


@settings(max_examples=60)
@given(corpus())
def test_scan_matches_reference_on_both_backends(rust_kernels, numpy_kernels, case) -> None:
    dim, slots, spec, query = case
    with tempfile.TemporaryDirectory() as tmp:
        path = write(Path(tmp) / "x.vec", dim, slots, capacity=len(slots) + 3)
        want = scan_oracle(slots, query, spec)
        for kernels in (rust_kernels, numpy_kernels):
            index = kernels.VectorIndex.open(path)
            assert as_lists(run_scan(index, query, spec)) == want
            # Chunking and threads never change the answer (numpy ignores threads).
            for chunk_rows, threads in ((1, 1), (3, 2), (7, 3), (4096, 0)):
                got = run_scan(index, query, spec, chunk_rows=chunk_rows, threads=threads)
                assert as_lists(got) == want


def test_scan_is_identical_across_chunks_and_threads_on_real_floats(
    rust_kernels, numpy_kernels, tmp_path
):
    rng = np.random.default_rng(7)
    dim, n = 33, 3000
    slots = [
        SlotSpec(
            i + 1,
            int(rng.integers(0, 500)),
            1,
            2,
            3,
            0,
            rng.standard_normal(dim).astype(np.float32),
        )
        for i in range(n)
    ]
    path = write(tmp_path / "f.vec", dim, slots)
    query = rng.standard_normal(dim).astype(np.float32)
    spec = ScanSpec(agent=1, window=1000, reach=2600, threshold=-1.0, k=25, far_k=40)
    for kernels in (rust_kernels, numpy_kernels):
        index = kernels.VectorIndex.open(path)
        base = as_lists(run_scan(index, query, spec))
        for chunk_rows in (1, 63, 64, 65, 999, 100_000):
            for threads in (1, 2, 0):
                assert (
                    as_lists(run_scan(index, query, spec, chunk_rows=chunk_rows, threads=threads))
                    == base
                )
    # Across backends the scores agree to float32 rounding.
    a = run_scan(rust_kernels.VectorIndex.open(path), query, spec)
    b = run_scan(numpy_kernels.VectorIndex.open(path), query, spec)
    np.testing.assert_allclose(a[1], b[1], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(a[3], b[3], rtol=1e-5, atol=1e-5)


def one(id: int, key: int, vec, *, agent=1, project=0, channel=0, source=0, **kw) -> SlotSpec:
    return SlotSpec(id, key, agent, project, channel, source, np.array(vec, np.float32), **kw)


def test_scope_rules_and_positions(kernels: ModuleType, tmp_path: Path) -> None:
    a, b = scope_hash("alice"), scope_hash("bob")
    p, empty = scope_hash("proj"), scope_hash("")
    slots = [
        one(1, 100, [1], agent=a, project=p),
        one(2, 101, [2], agent=b, project=p),  # other agent: no position
        one(3, 102, [3], agent=a, project=empty),
        one(4, 103, [4], agent=a, project=scope_hash("other")),  # project filtered out
        one(5, 104, [5], agent=a, project=p, deleted=True),  # deleted: no position
        one(6, 105, [6], agent=a, project=p, foreign=True),  # foreign: position, no score
        one(7, 106, [7], agent=a, project=p, source=scope_hash("s1")),
    ]
    index = kernels.VectorIndex.open(write(tmp_path / "s.vec", 1, slots))
    q = np.ones(1, np.float32)
    projects = np.array([p, empty], np.uint64)
    # Scan order newest first: 7, 6(foreign), 3, 1. Window of 2 = {7, 6}; far = {3, 1}.
    near_ids, _, far_ids, _ = index.scan(q, a, projects, NONE, NONE, 2, 10, -1.0, 10, 10)
    assert near_ids.tolist() == [7]
    assert far_ids.tolist() == [3, 1]
    # reach <= window: no far region at all.
    _, _, far_ids, _ = index.scan(q, a, projects, NONE, NONE, 2, 2, -1.0, 10, 10)
    assert far_ids.tolist() == []
    # Source set: only row 7 carries source s1; rows without a source never match a set.
    near_ids, *_ = index.scan(
        q, a, NONE, NONE, np.array([scope_hash("s1")], np.uint64), 10, 0, -1.0, 10, 10
    )
    assert near_ids.tolist() == [7]
    # Agent is exact: bob sees only his row.
    near_ids, *_ = index.scan(q, b, NONE, NONE, NONE, 10, 0, -1.0, 10, 10)
    assert near_ids.tolist() == [2]


def test_same_second_rows_newest_id_first(kernels: ModuleType, tmp_path: Path) -> None:
    # Three rows in one second: the window of 2 keeps the two highest ids (spec §19.1).
    slots = [one(i, 50, [1.0]) for i in (10, 11, 12)]
    index = kernels.VectorIndex.open(write(tmp_path / "t.vec", 1, slots))
    near_ids, near_scores, *_ = index.scan(
        np.ones(1, np.float32), 1, NONE, NONE, NONE, 2, 0, 0.0, 5, 0
    )
    assert near_ids.tolist() == [12, 11]  # equal scores: position (newest) first
    assert near_scores.tolist() == [1.0, 1.0]


def test_masked_out_rows_do_not_change_results(kernels: ModuleType, tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    base = [one(i + 1, i, rng.integers(-3, 4, 7)) for i in range(200)]
    noise = [one(1000 + i, i, rng.integers(-3, 4, 7), agent=9) for i in range(300)]
    deleted = [one(5000 + i, i, rng.integers(-3, 4, 7), deleted=True) for i in range(50)]
    q = rng.integers(-3, 4, 7).astype(np.float32)
    spec = ScanSpec(agent=1, window=50, reach=150, threshold=-1e30, k=20, far_k=20)
    plain = kernels.VectorIndex.open(write(tmp_path / "a.vec", 7, base))
    mixed = kernels.VectorIndex.open(write(tmp_path / "b.vec", 7, noise + base + deleted))
    assert as_lists(run_scan(plain, q, spec)) == as_lists(run_scan(mixed, q, spec))


def test_header_properties_and_live_counters(kernels: ModuleType, tmp_path: Path) -> None:
    path = tmp_path / "h.vec"
    writer = VectorFileWriter.create(path, 4, 8, UID, 1)
    append(writer, one(1, 10, np.ones(4)))
    writer.flush()
    index = kernels.VectorIndex.open(path)
    assert (index.dim, index.capacity, index.count, index.live, index.table) == (4, 8, 1, 1, 1)
    assert index.db_uid == UID and index.applied_seq == 0 and index.dirty == 0
    # The sync appends in place; an open index sees it without reopening.
    append(writer, one(2, 11, 2 * np.ones(4)))
    writer.set_deleted(0)
    writer.set_header(applied_seq=-5, dirty=1)
    writer.flush()
    assert (index.count, index.live, index.applied_seq, index.dirty) == (2, 1, -5, 1)
    near_ids, near_scores, *_ = index.scan(
        np.ones(4, np.float32), 1, NONE, NONE, NONE, 10, 0, 0.0, 5, 0
    )
    assert (near_ids.tolist(), near_scores.tolist()) == ([2], [8.0])
    with pytest.raises(AttributeError):
        index.dim = 3  # type: ignore[misc]
    writer.close()


def test_grow_keeps_every_slot(kernels: ModuleType, tmp_path: Path) -> None:
    path = tmp_path / "g.vec"
    writer = VectorFileWriter.create(path, 3, 2, UID, 0)
    rows = [(1, 5, [1, 0, 0]), (2, 7, [0, 1, 0])]
    for row_id, key, vec in rows:
        append(writer, one(row_id, key, vec))
    writer.set_header(applied_seq=9)
    writer.grow(10)
    append(writer, one(3, 6, [0, 0, 1]))
    writer.close()
    assert os.path.getsize(path) == Layout.of(3, 10).file_len
    index = kernels.VectorIndex.open(path)
    assert (index.capacity, index.count, index.applied_seq) == (10, 3, 9)
    near_ids, *_ = index.scan(np.ones(3, np.float32), 1, NONE, NONE, NONE, 10, 0, -1.0, 10, 0)
    assert near_ids.tolist() == [2, 3, 1]  # equal scores: newest key first


def test_scope_hash_is_blake2b_little_endian() -> None:
    import hashlib

    want = int.from_bytes(hashlib.blake2b(b"agent-7", digest_size=8).digest(), "little")
    assert scope_hash("agent-7") == want
    assert scope_hash("") != 0


# -- corrupt files ---------------------------------------------------------------------------


def good_file(tmp_path: Path) -> bytes:
    slots = [one(1, 1, [1, 2]), one(2, 2, [3, 4])]
    return write(tmp_path / "good.vec", 2, slots, capacity=3).read_bytes()


def patch(data: bytes, offset: int, value: bytes) -> bytes:
    return data[:offset] + value + data[offset + len(value) :]


CORRUPTIONS = {
    "empty": lambda d: b"",
    "short_header": lambda d: d[: HEADER_LEN - 1],
    "truncated": lambda d: d[:-1],
    "oversized": lambda d: d + b"\0",
    "wrong_magic": lambda d: patch(d, 0, b"CPVECIX2"),
    "wrong_version": lambda d: patch(d, 8, (1).to_bytes(4, "little")),
    "zero_dim": lambda d: patch(d, 12, (0).to_bytes(4, "little")),
    "wrong_dim": lambda d: patch(d, 12, (3).to_bytes(4, "little")),
    "count_over_capacity": lambda d: patch(d, 16, (4).to_bytes(8, "little")),
    "huge_capacity": lambda d: patch(d, 24, (2**63).to_bytes(8, "little")),
    "order_out_of_range": lambda d: patch(
        d, Layout.of(2, 3).offsets["order"], (2).to_bytes(4, "little")
    ),
}


@pytest.mark.parametrize("name", sorted(CORRUPTIONS))
def test_corrupt_files_raise_store_corrupt(kernels: ModuleType, tmp_path: Path, name) -> None:
    path = tmp_path / f"{name}.vec"
    path.write_bytes(CORRUPTIONS[name](good_file(tmp_path)))
    with pytest.raises(StoreCorrupt):
        kernels.VectorIndex.open(path)


def test_good_file_opens(kernels: ModuleType, tmp_path: Path) -> None:
    path = tmp_path / "ok.vec"
    path.write_bytes(good_file(tmp_path))
    assert kernels.VectorIndex.open(path).count == 2


def test_missing_file_is_file_not_found(kernels: ModuleType, tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        kernels.VectorIndex.open(tmp_path / "absent.vec")


def test_count_corrupted_after_open_raises_on_scan(kernels: ModuleType, tmp_path: Path) -> None:
    path = tmp_path / "late.vec"
    path.write_bytes(good_file(tmp_path))
    index = kernels.VectorIndex.open(path)
    with open(path, "r+b") as f:  # another process scribbles over the header
        f.seek(16)
        f.write((99).to_bytes(8, "little"))
    with pytest.raises(StoreCorrupt):
        index.scan(np.ones(2, np.float32), 1, NONE, NONE, NONE, 10, 0, -1.0, 5, 0)


def test_scan_rejects_wrong_query_width(kernels: ModuleType, tmp_path: Path) -> None:
    path = tmp_path / "w.vec"
    path.write_bytes(good_file(tmp_path))
    index = kernels.VectorIndex.open(path)
    with pytest.raises(ValueError):
        index.scan(np.ones(3, np.float32), 1, NONE, NONE, NONE, 10, 0, -1.0, 5, 0)


def test_create_over_a_mapped_file_leaves_the_reader_intact(kernels, tmp_path: Path) -> None:
    path = write(tmp_path / "r.vec", 2, [one(1, 1, [1, 2])])
    index = kernels.VectorIndex.open(path)
    VectorFileWriter.create(path, 2, 1, UID, 0).close()  # a rebuild written in place
    near_ids, *_ = index.scan(np.ones(2, np.float32), 1, NONE, NONE, NONE, 5, 0, -1.0, 5, 0)
    assert near_ids.tolist() == [1]  # the old file, still mapped, not a SIGBUS
    assert kernels.VectorIndex.open(path).count == 0


def test_extend_matches_appending_one_by_one(kernels, tmp_path: Path) -> None:
    rng = np.random.default_rng(11)
    n, dim = 300, 5
    ids = np.arange(1, n + 1, dtype=np.int64)
    keys = rng.integers(0, 40, n).astype(np.int64)
    scopes = {name: rng.integers(1, 3, n).astype(np.uint64) for name in ("agent", "project")}
    zeros = np.zeros(n, np.uint64)
    vectors = rng.integers(-3, 4, (n, dim)).astype(np.float32)
    bulk = VectorFileWriter.create(tmp_path / "bulk.vec", dim, n, UID, 0)
    bulk.extend(ids, keys, channel=zeros, source=zeros, vectors=vectors, **scopes)
    order = bulk.view("order")
    pairs = [(int(keys[s]), int(ids[s])) for s in order]
    assert pairs == sorted(pairs, reverse=True)
    bulk.close()
    slots = [
        one(
            int(ids[i]),
            int(keys[i]),
            vectors[i],
            agent=int(scopes["agent"][i]),
            project=int(scopes["project"][i]),
        )
        for i in range(n)
    ]
    single = write(tmp_path / "single.vec", dim, slots)
    q = rng.integers(-3, 4, dim).astype(np.float32)
    spec = ScanSpec(agent=1, projects=(2,), window=40, reach=120, k=15, far_k=15)
    a = as_lists(run_scan(kernels.VectorIndex.open(tmp_path / "bulk.vec"), q, spec))
    b = as_lists(run_scan(kernels.VectorIndex.open(single), q, spec))
    assert a == b == scan_oracle(slots, q, spec)
