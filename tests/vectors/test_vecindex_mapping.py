"""The kernel's mapping of an index file is kept from scan to scan (`VectorIndex.kernel_handle`)
while the file is the same file, sees rows appended in place, and is replaced when a rebuild or
a growth renames a new file in. Every answer still equals the SQL window's."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import cpersona.vectors.index as index_mod
import numpy as np
import pytest
from cpersona.models import ProjectFilter
from cpersona.storage.scan_request import ScanLimits
from cpersona.vectors.search import Scope, scan, scan_sqlite
from vecindex_support import IntEmbedder, as_lists, new_engine

SCOPE = Scope("a", ProjectFilter(None))
LIMITS = ScanLimits(window=4, reach=9, threshold=-100.0, k=3, far_k=3)


def both(engine, query: np.ndarray, kernels: ModuleType) -> tuple[object, object]:
    index = engine.indexes["memories"]
    return (
        as_lists(scan(index, query, SCOPE, LIMITS, kernels=kernels)),
        as_lists(scan_sqlite(engine.db, "memories", query, SCOPE, LIMITS, kernels=kernels)),
    )


def store(engine, first: int, n: int) -> None:
    for i in range(first, first + n):
        assert engine.writer.store("a", {"content": f"row {i}"}, "", "")["result"] == "stored"


def handle(engine) -> object:
    cached = engine.indexes["memories"]._handle
    assert cached is not None
    return cached[1][0]  # (kernel handle, checksums)


def test_mapping_is_kept_across_scans_and_in_place_writes(
    kernels: ModuleType, tmp_path: Path
) -> None:
    engine = new_engine(tmp_path / "m.db", IntEmbedder())
    try:
        query = IntEmbedder().embed(["query"])[0]
        store(engine, 0, 6)
        got, want = both(engine, query, kernels)
        assert got == want
        first = handle(engine)
        store(engine, 6, 5)  # appended in place: same file
        got, want = both(engine, query, kernels)
        assert got == want
        assert handle(engine) is first
        engine.indexes["memories"].rebuild()  # a new file renamed in
        got, want = both(engine, query, kernels)
        assert got == want
        assert handle(engine) is not first
    finally:
        engine.close()


def test_mapping_is_replaced_when_the_file_grows(
    kernels: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(index_mod, "HEADROOM", 1)
    engine = new_engine(tmp_path / "m.db", IntEmbedder())
    try:
        query = IntEmbedder().embed(["query"])[0]
        store(engine, 0, 3)
        engine.indexes["memories"].rebuild()  # capacity 4
        assert both(engine, query, kernels)[0] == both(engine, query, kernels)[1]
        first = handle(engine)
        capacity = engine.indexes["memories"].status().count + 1
        store(engine, 3, 4)  # beyond the capacity: the file grows (renamed in)
        got, want = both(engine, query, kernels)
        assert got == want
        assert handle(engine) is not first
        assert handle(engine).capacity > capacity
    finally:
        engine.close()
