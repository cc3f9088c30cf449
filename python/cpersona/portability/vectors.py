"""The vectors of an import: which of the file's are kept, and the rows embedded here instead.

A vector is a model's embedding of a text; compared with the vectors of another model it means
nothing, yet it was stored byte for byte and recalled at cosine 1.0 by whatever phrase made it
(issue 21). So an export names the model of each table's vectors (its header's
`embedding_models`), and an import keeps a row's vector only when the file names the model
the target table's vectors are, and the vector has that model's width. Every other row is
stored without the file's vector and embedded with the table's own model before the write;
when that model cannot answer, the row is stored without one and counted (`missing_embeddings`;
`check_health(fix=true)` fills it). A file that names no model (CPersona 2.5.x, cpersona
before 0.1) has no vector kept: nothing says which model made them.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from cpersona.errors import EmbeddingUnavailable
from cpersona.portability import records
from cpersona.storage.bulk import EpisodeRecord, MemoryRecord, ProfileRecord

if TYPE_CHECKING:
    from cpersona.portability.host import Host
    from cpersona.storage import bulk

log = logging.getLogger("cpersona.portability")

#: Records between two progress lines of a long import.
PROGRESS_EVERY = 2000
#: Texts per embedding call (the providers split further to their own batch limits).
EMBED_BATCH = 64
#: Why a file's vector was not kept (the keys of the response's `foreign_vectors`).
ANOTHER_MODEL = "another_model"
ANOTHER_WIDTH = "another_width"
NO_MODEL = "model_not_named"

Progress = Callable[[str], None]
Kind = Literal["memory", "episode", "profile"]
#: (model name, vector width or None when unknown)
Model = tuple[str, int | None]


@dataclass(slots=True)
class PlannedRow:
    kind: Kind
    line: int
    record: MemoryRecord | EpisodeRecord | ProfileRecord
    #: The file gave no usable vector for this row (memories and episodes only).
    needs_vector: bool = False
    #: The vector was computed by this server during the import.
    embedded_here: bool = False
    #: Why the file's vector was not kept ("" = it was, or there was none).
    refused: str = ""


def table(item: PlannedRow) -> str:
    return "episodes" if isinstance(item.record, EpisodeRecord) else "memories"


def file_models(header: dict[str, Any] | None) -> dict[str, Model]:
    """{table: (model, dim)} the file's header names (`embedding_models`); {} for a file that
    names none (2.5.x) or names them in a shape this version does not read."""
    named = header.get("embedding_models") if header else None
    out: dict[str, Model] = {}
    if not isinstance(named, dict):
        return out
    for name in ("memories", "episodes"):
        entry = named.get(name)
        if not isinstance(entry, dict) or not isinstance(entry.get("model"), str):
            continue
        dim = entry.get("dim")
        out[name] = (entry["model"], dim if isinstance(dim, int) and dim > 0 else None)
    return out


def export_models(recorded: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The header's `embedding_models` from the database's record ({table: Recorded}); a
    table whose model nobody identified is left out (its vectors are then not kept)."""
    return {
        t: {"model": r.model, "dim": r.dim}
        for t, r in sorted(recorded.items())
        if r.model and r.model != "unknown"
    }


def table_models(engine: Host) -> dict[str, Model | None]:
    """{table: the model (and width) its vectors are, or None: it takes none here}."""
    out: dict[str, Model | None] = {}
    recorded = _recorded(engine)
    for name, route in engine.router.routes().items():
        if route.provider is not None:
            dim = route.provider.dim()
            if dim is None and name in recorded and recorded[name].model == route.name:
                dim = recorded[name].dim
            out[name] = (route.name, dim)
        elif route.stored and route.stored != "unknown":
            found = recorded.get(name)
            out[name] = (route.stored, found.dim if found is not None else None)
        else:
            out[name] = None
    return out


def _recorded(engine: Host) -> dict[str, Any]:
    from cpersona.storage import vector_models

    return vector_models.read(engine.db)[0]


def screen(
    items: list[PlannedRow], named: dict[str, Model], target: dict[str, Model | None]
) -> None:
    """Drop every file vector that is not the target table's model at its width; those rows
    are embedded here (`embed`) like rows the file carried no vector for."""
    for item in items:
        rec = item.record
        if isinstance(rec, ProfileRecord) or rec.embedding is None:
            continue
        name = table(item)
        want, have = target.get(name), named.get(name)
        width = len(rec.embedding) // 4
        if have is None:
            item.refused = NO_MODEL
        elif want is None or have[0] != want[0]:
            item.refused = ANOTHER_MODEL
        elif (want[1] is not None and width != want[1]) or (have[1] not in (None, width)):
            item.refused = ANOTHER_WIDTH
        else:
            continue
        item.record = dataclasses.replace(rec, embedding=None)
        item.needs_vector = True


def admit(rows: bulk.Rows, items: list[PlannedRow], target: dict[str, Model | None]) -> None:
    """Inside the write transaction: claim each table for the model of the vectors about to
    be written (a table without vectors takes it, as a store's first vector does); if the
    table's vectors became another model's since (a conversion cut over), the rows go in
    without a vector instead."""
    for name in ("memories", "episodes"):
        with_vector = [
            i for i in items if table(i) == name and getattr(i.record, "embedding", None)
        ]
        model = target.get(name)
        if not with_vector or model is None:
            continue
        if rows.claim_vectors(name, model[0], model[1]):
            continue
        for item in with_vector:
            item.record = dataclasses.replace(item.record, embedding=None)  # type: ignore[arg-type]
            item.embedded_here = False


def counts(reasons: list[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for why in reasons:
        out[why] = out.get(why, 0) + 1
    return out


def embed(engine: Host, items: list[PlannedRow], report: Progress) -> None:
    """Give the rows the file carried no vector for one from this server's model, in batches.

    Runs before the write transaction. When embedding is unavailable the rows keep a NULL
    embedding and are counted in the response (`missing_embeddings`).
    """
    if not items or not engine.embedder.available:
        return
    import numpy as np  # on first use: see docs/notes/performance-notes.md, "Start-up"

    # Each table's rows get the model of that table's stored vectors (embedding/routing.py):
    # a row embedded by another model would be compared with them by every recall.
    providers = {t: engine.router.passage(t) for t in ("memories", "episodes")}
    items = [i for i in items if providers[table(i)] is not None]
    items.sort(key=table)
    for start in range(0, len(items), EMBED_BATCH):
        batch = items[start : start + EMBED_BATCH]
        try:
            vectors = np.concatenate(
                [
                    providers[name].embed(  # type: ignore[union-attr]
                        [_passage(i.record) for i in batch if table(i) == name], kind="passage"
                    )
                    for name in dict.fromkeys(table(i) for i in batch)
                ]
            )
        except EmbeddingUnavailable as exc:
            log.warning(
                "import: embedding unavailable (%s); %s rows are stored without a vector",
                exc,
                len(items) - start,
            )
            return
        for item, row in zip(batch, vectors, strict=True):
            blob = records.vector_blob(row)
            rec = item.record
            if blob is not None and isinstance(rec, MemoryRecord | EpisodeRecord):
                item.record = dataclasses.replace(rec, embedding=blob)
                item.embedded_here = True
        done = start + len(batch)
        if len(items) >= PROGRESS_EVERY and (
            done % PROGRESS_EVERY < EMBED_BATCH or done == len(items)
        ):
            report(f"import: embedded {done}/{len(items)} rows without a vector in the file")


def _passage(rec: MemoryRecord | EpisodeRecord | ProfileRecord) -> str:
    """The text a row's vector embeds: a memory's content, an episode's summary."""
    if isinstance(rec, EpisodeRecord):
        return rec.summary
    return rec.content
