"""The twin of rust/py/layout.rs: `layout()`, the file layouts as the Python declarations give
them (`cpersona.vectors.format`, `cpersona.vectors.checksums`, `cpersona.fts.format`), in the
shape `_core.layout()` gives the Rust core's tables, so that one comparison
(`tests/kernels/test_kernels_layout.py`) finds any drift between the two."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from cpersona.timerange import NO_TIME
from cpersona.vectors import checksums
from cpersona.vectors import format as vector_format


def _named(fields: tuple[tuple[str, str], ...]) -> list[tuple[str, str]]:
    return [(name, np.dtype(dtype).str) for name, dtype in fields]


def layout() -> dict[str, dict[str, Any]]:
    """The file layouts the readers follow, dtypes as numpy names them (see `_core.layout`)."""
    # Imported here: the full-text writer pulls in the storage rows it encodes, which the
    # kernels never need.
    from cpersona.fts import format as fts_format

    header_fields: Mapping[str, Any] = vector_format.HEADER_DTYPE.fields or {}
    header = [
        (name, int(header_fields[name][1]), header_fields[name][0].str)
        for name in vector_format.HEADER_DTYPE.names or ()
    ]
    return {
        "vector_file": {
            "magic": vector_format.MAGIC,
            "version": vector_format.VERSION,
            "header_len": vector_format.HEADER_LEN,
            "header": header,
            "section_align": vector_format.SECTION_ALIGN,
            "sections": _named(vector_format.SECTIONS),
            "dim_section": vector_format.DIM_SECTION,
            "flag_deleted": vector_format.FLAG_DELETED,
            "flag_foreign": vector_format.FLAG_FOREIGN,
            "no_time": NO_TIME,
            "checksummed": list(checksums.CHECKSUMMED),
        },
        "fulltext_records": {
            "length": np.dtype(fts_format.RECORD_LENGTH).str,
            "op_put": fts_format.OP_PUT,
            "op_delete": fts_format.OP_DELETE,
            "put": _named(fts_format.PUT_FIELDS),
            "column_length": np.dtype(fts_format.COLUMN_LENGTH).str,
            "delete": _named(fts_format.DELETE_FIELDS),
        },
        # Only the Rust core reads segments (on these kernels the FTS arms run FTS5's
        # statements); declared here so that the writer's CRC field stays where the core reads it.
        "fulltext_segment": {
            "magic": fts_format.SEGMENT_MAGIC,
            "version": fts_format.SEGMENT_VERSION,
            "header_len": fts_format.SEGMENT_HEADER_LEN,
            "header": list(fts_format.SEGMENT_HEADER),
            "section_align": fts_format.SEGMENT_SECTION_ALIGN,
            "sections": list(fts_format.SEGMENT_SECTIONS),
        },
    }
