"""The file layouts: the tables the Rust core reads by (`_core.layout()`) equal the Python
declarations the writers and the numpy reader work from (`_fallback.layout()`, built from
vectors/format.py, vectors/checksums.py and fts/format.py), and both describe the bytes the
writers put in the files. A layout changed on one side only fails here."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest
from cpersona import _fallback
from cpersona.derived.scope import scope_hash
from cpersona.fts import format as fts_format
from cpersona.storage.fulltext import FtsRow
from cpersona.vectors import checksums
from cpersona.vectors import format as vector_format

DIM, CAPACITY = 3, 5


def test_the_rust_tables_equal_the_python_declarations(rust_kernels: ModuleType) -> None:
    assert rust_kernels.layout() == _fallback.layout()


def _swapped(pairs: tuple[Any, ...]) -> tuple[Any, ...]:
    return (pairs[1], pairs[0], *pairs[2:])


DRIFTS = {
    "vector version": (vector_format, "VERSION", vector_format.VERSION + 1),
    "vector header field": (
        vector_format,
        "HEADER_DTYPE",
        np.dtype([("magic", "S8"), ("version", "<u8"), ("rest", "V112")]),
    ),
    "section order": (vector_format, "SECTIONS", _swapped(vector_format.SECTIONS)),
    "section alignment": (vector_format, "SECTION_ALIGN", 32),
    "foreign flag": (vector_format, "FLAG_FOREIGN", 4),
    "checksummed sections": (checksums, "CHECKSUMMED", checksums.CHECKSUMMED[:-1]),
    "put fields": (fts_format, "PUT_FIELDS", (*fts_format.PUT_FIELDS[:-2], ("columns", "|u1"))),
    "delete op": (fts_format, "OP_DELETE", 3),
    "column length": (fts_format, "COLUMN_LENGTH", "<u8"),
    "segment crc place": (
        fts_format,
        "SEGMENT_HEADER",
        tuple(
            (n, o + 4, d) if n == "body_crc" else (n, o, d) for n, o, d in fts_format.SEGMENT_HEADER
        ),
    ),
}


@pytest.mark.parametrize("drift", sorted(DRIFTS))
def test_a_python_declaration_changed_alone_no_longer_equals_the_rust_tables(
    rust_kernels: ModuleType, monkeypatch: pytest.MonkeyPatch, drift: str
) -> None:
    module, name, value = DRIFTS[drift]
    monkeypatch.setattr(module, name, value)
    assert _fallback.layout() != rust_kernels.layout()


def _written(tmp_path: Path) -> tuple[Path, vector_format.Header, np.ndarray]:
    path = tmp_path / "layout.vec"
    ids = np.array([7, 3, 9], np.int64)
    with vector_format.VectorFileWriter.create(path, DIM, CAPACITY, bytes(range(16)), 1) as w:
        for i, row_id in enumerate(ids.tolist()):
            w.append(
                row_id,
                100 + i,
                time=1_000 * i,
                agent=11,
                project=12,
                channel=13,
                source=0,
                vector=np.full(DIM, i, np.float32),
            )
        w.set_deleted(1)
        w.set_header(applied_seq=42, dirty=0)
        header = w.header()
    return path, header, ids


def test_the_declared_vector_layout_finds_what_the_writer_wrote(
    rust_kernels: ModuleType, kernels: ModuleType, tmp_path: Path
) -> None:
    path, header, ids = _written(tmp_path)
    declared = rust_kernels.layout()["vector_file"]
    raw = path.read_bytes()
    fields = {
        name: np.frombuffer(raw, np.dtype(dtype), count=1, offset=offset)[0]
        for name, offset, dtype in declared["header"]
    }
    index = kernels.VectorIndex.open(path)
    assert bytes(fields["magic"]) == declared["magic"]
    assert int(fields["version"]) == declared["version"]
    for name in ("dim", "count", "capacity", "applied_seq", "table", "dirty", "live"):
        assert int(fields[name]) == getattr(index, name) == getattr(header, name), name
    assert bytes(fields["db_uid"]) == index.db_uid == header.db_uid
    # Each section at the next aligned offset after the one before, as declared.
    end, sections = declared["header_len"], {}
    for name, dtype in declared["sections"]:
        start = -(-end // declared["section_align"]) * declared["section_align"]
        width = DIM if name == declared["dim_section"] else 1
        sections[name] = np.frombuffer(raw, dtype, count=CAPACITY * width, offset=start)
        end = start + sections[name].nbytes
    assert end == len(raw)
    assert sections["ids"][:3].tolist() == ids.tolist()
    assert sections["times"][:3].tolist() == [0, 1_000, 2_000]
    assert sections["flags"][:3].tolist() == [0, declared["flag_deleted"], 0]
    assert sections["vectors"].reshape(CAPACITY, DIM)[2].tolist() == [2.0] * DIM


def test_the_declared_checksum_covers_what_the_sidecar_holds(
    rust_kernels: ModuleType, tmp_path: Path
) -> None:
    path, _, _ = _written(tmp_path)
    with vector_format.VectorFileWriter(path) as writer:
        checksums.write(writer)
        views = {name: writer.view(name) for name, _ in vector_format.SECTIONS}
    stored = checksums.open_read(path, CAPACITY)
    for slot in range(3):
        total = 0
        for name in rust_kernels.layout()["vector_file"]["checksummed"]:
            total += int(np.atleast_1d(views[name][slot]).view("<u4").sum(dtype=np.uint64))
        assert total % 2**32 == int(stored[slot]), slot


def test_the_declared_put_record_decodes_what_the_writer_encodes(rust_kernels: ModuleType) -> None:
    declared = rust_kernels.layout()["fulltext_records"]
    row = FtsRow(
        id=5,
        key=77,
        agent_id="a",
        project_id="p",
        channel="c",
        source_id=None,
        columns=("héllo", "x"),
        time=-3,
    )
    raw = fts_format.put_record(row)
    at = 0

    def take(dtype: str) -> Any:
        nonlocal at
        value = np.frombuffer(raw, np.dtype(dtype), count=1, offset=at)[0]
        at += np.dtype(dtype).itemsize
        return value

    assert int(take(declared["length"])) == len(raw) - np.dtype(declared["length"]).itemsize
    got = {name: int(take(dtype)) for name, dtype in declared["put"]}
    columns = []
    for _ in range(got["columns"]):
        n = int(take(declared["column_length"]))
        columns.append(raw[at : at + n].decode("utf-8"))
        at += n
    assert at == len(raw)
    assert got["op"] == declared["op_put"]
    assert (got["id"], got["key"], got["time"]) == (5, 77, -3)
    assert got["agent"] == scope_hash("a") and got["source"] == 0
    assert tuple(columns) == row.columns
    delete = fts_format.delete_record(9)
    assert delete[4] == declared["op_delete"]
    assert len(delete) == 4 + sum(np.dtype(d).itemsize for _, d in declared["delete"])
