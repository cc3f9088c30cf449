"""A rebuild writes its rows in batches (slots.append_rows, issue 33): the file it makes is the
one `append_row`, row by row, makes from the same rows, whatever their order, scopes and
widths (a batch out of order or holding a foreign-width vector is written row by row)."""

from __future__ import annotations

import numpy as np
from cpersona.storage.embeddings import IndexRow
from cpersona.vectors.format import SECTIONS, TABLE_MEMORIES, VectorFileWriter
from cpersona.vectors.slots import append_row, append_rows, release
from hypothesis import given, settings
from hypothesis import strategies as st

DIM = 4
NAMES = st.sampled_from(["", "a", "b", "proj", "日本"])


@st.composite
def batches(draw: st.DrawFn) -> list[list[IndexRow]]:
    n = draw(st.integers(0, 40))
    # Mostly newest first (what a rebuild reads), sometimes not: both paths are exercised.
    keys = sorted(draw(st.lists(st.integers(0, 6), min_size=n, max_size=n)), reverse=True)
    if draw(st.booleans()):
        keys = draw(st.permutations(keys))
    ids = draw(st.lists(st.integers(1, 10_000), min_size=n, max_size=n, unique=True))
    pairs = (
        sorted(zip(keys, ids, strict=True), reverse=True)
        if draw(st.booleans())
        else [*zip(keys, ids, strict=True)]
    )
    rows = []
    for key, row_id in pairs:
        width = draw(st.sampled_from([DIM, DIM, DIM, DIM, 2]))
        values = draw(st.lists(st.floats(-1, 1, width=32), min_size=width, max_size=width))
        rows.append(
            IndexRow(
                row_id, key, draw(NAMES), draw(NAMES), draw(NAMES),
                draw(st.one_of(st.none(), NAMES)),
                np.asarray(values, dtype="<f4").tobytes(), draw(st.integers(-5, 5)),
            )
        )  # fmt: skip
    cuts = sorted(draw(st.lists(st.integers(0, n), max_size=4)))
    return [rows[a:b] for a, b in zip([0, *cuts], [*cuts, n], strict=True)]


@settings(max_examples=40, deadline=None)
@given(batches(), st.integers(0, 30))
def test_batches_write_the_file_rows_one_by_one_write(
    tmp_path_factory: object, parts: list[list[IndexRow]], capacity: int
) -> None:
    tmp = tmp_path_factory.mktemp("batched")  # type: ignore[attr-defined]
    files = {}
    for how in ("rows", "batches"):
        path = tmp / f"{how}.vec"
        writer = VectorFileWriter.create(path, DIM, capacity, bytes(16), TABLE_MEMORIES)
        try:
            for part in parts:
                if how == "rows":
                    for row in part:
                        append_row(writer, row, 8)
                else:
                    append_rows(writer, part, 8)
            assert writer.count == sum(map(len, parts))
            files[how] = {name: writer.view(name).copy() for name, _ in SECTIONS}
        finally:
            release(writer)
    for name, _ in SECTIONS:
        np.testing.assert_array_equal(files["batches"][name], files["rows"][name], err_msg=name)
