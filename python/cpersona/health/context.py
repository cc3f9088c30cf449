"""What one health run works on: the database, the settings, the embedder and the derived files.

A `HealthContext` is built from a running `Engine` (the MCP tools) or from the pieces the
checkup CLI opens itself (a read-only database for report-only runs, §7.7). Checks read
through `c`: the reader for report-only runs, the write transaction inside a fix run (both
storage handles: no connection or SQL here).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from cpersona.config import Settings
from cpersona.errors import EmbeddingUnavailable
from cpersona.operating_context import OperatingContext
from cpersona.retrieval.advisory import EmbeddingHealth
from cpersona.retrieval.sidecar import Sidecar
from cpersona.storage import Store
from cpersona.storage.upkeep.embedding_rows import recorded_models
from cpersona.storage.upkeep.handle import Handle, reading

if TYPE_CHECKING:
    from cpersona.embedding.base import EmbeddingProvider
    from cpersona.engine import Engine
    from cpersona.vectors.index import VectorIndex


@dataclass
class Probe:
    """What a fix run learned from the embedding backend before taking the write lock."""

    ran: bool = False
    error: str | None = None
    misconfigured: bool = False


@dataclass(frozen=True, slots=True)
class Reembed:
    """The vectors a fix run computed before its write lock for one table's rows without
    one: [(row id, float32 BLOB)], and the backend's error when it failed."""

    vectors: list[tuple[int, bytes]]
    error: str | None = None


@dataclass(frozen=True, slots=True)
class ModelProbe:
    """What the embedding_model check's probe found (health/checks/model.py): rows compared,
    and {table: ids} whose vectors differ. A fix run probes before its write lock and keeps
    the answer here for the check."""

    sampled: int
    differing: dict[str, list[int]]

    @property
    def count(self) -> int:
        return sum(len(ids) for ids in self.differing.values())


@dataclass
class HealthContext:
    db: Store
    settings: Settings
    embedder: EmbeddingProvider | None  # None: no embedding backend (`none` mode)
    oc: OperatingContext
    sidecar: Sidecar | None
    indexes: dict[str, VectorIndex] | None
    embedding_health: EmbeddingHealth | None = None
    read_only: bool = False
    agent_id: str = ""
    fix: bool = False
    #: The fix run's write transaction (None outside it); opaque, for storage functions.
    handle: Handle | None = None
    #: The provider's vector width (known, or probed in a fix run); None = unknown.
    dim: int | None = None
    probe: Probe = field(default_factory=Probe)
    #: Vectors computed before the write lock, per table (memories, episodes).
    reembeds: dict[str, Reembed] = field(default_factory=dict)
    #: Re-embeds still allowed this run (CPERSONA_REEMBED_ROW_CAP is per run).
    reembed_budget: int = 0
    #: The embedding_model probe a fix run made before its lock (used once), or None.
    model_probe: ModelProbe | None = None
    #: Rows a fix run redacted, as (table, agent_id, id, outcome), for the copies of their text
    #: outside this database (index files, the remote vector service).
    redacted: list[tuple[str, str, int, str]] = field(default_factory=list)

    @property
    def c(self) -> Handle:
        """What checks read through: the fix transaction inside a fix run, else the reader."""
        return self.handle if self.handle is not None else reading(self.db)

    @property
    def write_handle(self) -> Handle:
        """The fix run's transaction, which every repair but the post-commit ones writes in."""
        assert self.handle is not None, "repairs run inside the fix transaction"
        return self.handle

    @property
    def stores_blobs(self) -> bool:
        s = self.settings
        return s.vector_search_mode == "local" or s.store_blob

    @property
    def local_embedder(self) -> bool:
        """Whether embedding costs no network request (probes may then run in any run)."""
        return self.settings.embedding_provider not in ("http", "api")

    def takes_configured_vectors(self, table: str) -> bool:
        """Whether `table`'s vectors are the configured model's (or it has no record yet):
        a repair may write the configured model's vectors there and nowhere else."""
        if self.embedder is None:
            return False
        found = recorded_models(self.c).get(table)
        return found is None or found.model == self.embedder.name

    def embed(self, texts: Sequence[str]) -> list[bytes | None]:
        """float32 BLOBs of `texts` in batches of the http contract's size (None = unusable).

        Raises:
            EmbeddingUnavailable: the backend failed.
        """
        import numpy as np  # on first use: see docs/performance.md, "Start-up"

        from cpersona.embedding.base import MAX_BATCH

        assert self.embedder is not None
        out: list[bytes | None] = []
        for i in range(0, len(texts), MAX_BATCH):
            rows = np.asarray(
                self.embedder.embed(list(texts[i : i + MAX_BATCH]), kind="passage"),
                dtype=np.float32,
            )
            for row in rows:
                ok = row.size > 0 and bool(np.all(np.isfinite(row)))
                out.append(row.astype("<f4").tobytes() if ok else None)
        return out

    def try_embed(self, texts: Sequence[str]) -> tuple[list[bytes | None], str | None]:
        try:
            return self.embed(texts), None
        except EmbeddingUnavailable as exc:
            return [], str(exc)


def from_engine(engine: Engine, agent_id: str = "") -> HealthContext:
    """The context of one tool call over a running Engine."""
    embedder = engine.embedder if engine.embedder.available else None
    return HealthContext(
        db=engine.db,
        settings=engine.settings,
        embedder=embedder,
        oc=engine.operating_context,
        sidecar=engine.calibrator.sidecar,
        indexes=engine.indexes,
        embedding_health=engine.health,
        agent_id=agent_id,
    )
