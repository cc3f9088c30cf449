"""Where the derived index files go (derived/placement.py): both kinds follow the store's
`capabilities.derived_files`, so the vector index of a database that is no file of this host's
(PostgreSQL) sits in the host's cache directory beside the full-text index, as that one does."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from cpersona.derived.placement import cache_base
from cpersona.fts.index import FtsIndex
from cpersona.storage import Capabilities
from cpersona.vectors.index import VectorIndex


@dataclass
class _Elsewhere:
    """Only what placing the files reads of a store whose database is on another host."""

    path: str = "postgresql://app@db1:5432/memory"
    is_memory: bool = False
    capabilities: Capabilities = field(
        default_factory=lambda: Capabilities(
            vector_arm="index_file",
            full_text_in_database=False,
            derived_files="host_cache",
            local_files=False,
            shared=True,
        )
    )


def test_both_kinds_of_a_host_cache_database_sit_in_its_cache_directory(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    db = _Elsewhere()
    vec = VectorIndex(db, "memories")  # type: ignore[arg-type]
    fts = FtsIndex(db, "episodes", lambda: None)  # type: ignore[arg-type]
    base = cache_base(None, db.path)
    assert base.parent.parent == tmp_path / "cache" / "cpersona"
    assert vec.path == Path(f"{base}.memories.vec")
    assert vec.lock_path == Path(f"{base}.memories.vec.lock")
    assert fts.path == Path(f"{base}.episodes.fts")
    vec.close()
    fts.close()


def test_a_local_database_keeps_both_kinds_beside_its_file(tmp_path):
    db = _Elsewhere(path=str(tmp_path / "m.db"))
    db.capabilities = Capabilities(
        vector_arm="index_file",
        full_text_in_database=True,
        derived_files="beside_database",
        local_files=True,
        shared=False,
    )
    vec = VectorIndex(db, "episodes")  # type: ignore[arg-type]
    fts = FtsIndex(db, "memories", lambda: None)  # type: ignore[arg-type]
    assert vec.path == tmp_path / "m.db.episodes.vec"
    assert fts.path == tmp_path / "m.db.memories.fts"
    moved = VectorIndex(db, "memories", str(tmp_path / "elsewhere"))  # type: ignore[arg-type]
    assert moved.path == tmp_path / "elsewhere" / "m.db.memories.vec"
    for index in (vec, fts, moved):
        index.close()
