"""Which channel answers each arm on this store: chosen once, when the recaller is built, from
the store's capabilities and the derived index files it has (issue 31).

Adding a channel is a class with `stage` and `rank` (retrieval/channel.py) and one line in
`choose` below; fusion takes any number of lists.
"""

from __future__ import annotations

from dataclasses import dataclass

from cpersona import _backend
from cpersona.config import Settings
from cpersona.fts.index import FtsIndex
from cpersona.retrieval.candidates import Candidate
from cpersona.retrieval.channel import Backend, Channel, Fallback
from cpersona.retrieval.text_channels import EpisodeText, Fts5, FullTextFile, Keyword
from cpersona.retrieval.vector_channels import (
    ChunkedScan,
    PgVector,
    RemoteFirst,
    VectorChannel,
    VectorFile,
)
from cpersona.storage import Store, database_scan
from cpersona.vectors.index import VectorIndex
from cpersona.vectors.search import Hits


@dataclass(frozen=True, slots=True)
class Channels:
    """The channels of one recaller.

    `vector`: the vector arm (near and far lists), ranked first: on PostgreSQL its scan of an
    index file runs while the snapshot's BEGIN is on its way. `fused`: the other channels whose
    lists rrf / rsf fuse with the vector arm's, in the order they are ranked. The cascade
    (§5.1) reads `episodes` and `keyword` by name: its order is the spec's.
    """

    vector: Channel
    episodes: Channel
    keyword: Channel
    fused: tuple[Channel, ...]


@dataclass(frozen=True, slots=True)
class IndexFiles:
    """The derived index files a recaller's channels read, per table (engine.py opens them)."""

    vectors: dict[str, VectorIndex]
    full_text: dict[str, FtsIndex]


def choose(db: Store, settings: Settings, files: IndexFiles, *, remote: bool) -> Channels:
    """The channels for `db` with its index `files`; `remote`: a remote vector service ranks
    the vector arm when it answers."""
    kernels = _backend.load(settings.kernel)
    chunk = settings.vector_scan_chunk_rows
    in_database: Backend[Hits] = (
        PgVector(db) if database_scan.available(db) else ChunkedScan(db, kernels, chunk)
    )
    scans: dict[str, Backend[Hits]] = {}
    for table in ("memories", "episodes"):
        index = files.vectors.get(table)
        if index is not None and db.capabilities.vector_arm != "database":
            scans[table] = Fallback(VectorFile(index, kernels, chunk), in_database)
        else:
            scans[table] = in_database
    texts: dict[str, Backend[list[Candidate]]] = {}
    for table in ("memories", "episodes"):
        fts_index = files.full_text.get(table)
        texts[table] = (
            Fts5(db) if fts_index is None else Fallback(FullTextFile(fts_index), Fts5(db))
        )
    local = VectorChannel(scans)
    episodes = EpisodeText(texts["episodes"], settings)
    keyword = Keyword(db, texts["memories"], settings)
    fused: list[Channel] = [episodes]
    if settings.fts_enabled:  # without full-text search, fusion has no keyword list
        fused.append(keyword)
    return Channels(RemoteFirst(local) if remote else local, episodes, keyword, tuple(fused))
