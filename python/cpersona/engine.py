"""Engine: the one object a tool talks to. It owns the database, the embedder and the services.

Opening an Engine opens the database and reads the operating context, nothing more: the
embedder, the index files and the services (and numpy with them) are built on first use, so a
server answers `initialize` and `tools/list` without importing them
(docs/notes/performance-notes.md, "Start-up").
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cpersona.config import Settings
from cpersona.forwarding import Forwarded
from cpersona.operating_context import OperatingContext
from cpersona.session import Pauses
from cpersona.storage import Store, counts, open_database
from cpersona.yielding import CallActivity

if TYPE_CHECKING:
    from cpersona.derived.base import DerivedIndex
    from cpersona.embedding.base import EmbeddingProvider
    from cpersona.embedding.cache import CachedProvider
    from cpersona.embedding.routing import ModelRouter
    from cpersona.fts.index import FtsIndex
    from cpersona.memory.writes import Writer
    from cpersona.retrieval.advisory import EmbeddingHealth
    from cpersona.retrieval.calibration import Calibrator
    from cpersona.retrieval.pipeline import Recaller
    from cpersona.retrieval.thresholds import Thresholds
    from cpersona.tasks import TaskQueue
    from cpersona.update import UpdateCheck
    from cpersona.vectors.index import VectorIndex
    from cpersona.vectors.remote import RemoteVectors

log = logging.getLogger("cpersona")


@dataclass(frozen=True)
class Services:
    """Everything of an Engine beyond the database: built together, once, on first use."""

    embedder: CachedProvider
    indexes: dict[str, VectorIndex]
    writer: Writer
    thresholds: Thresholds
    health: EmbeddingHealth
    recaller: Recaller
    calibrator: Calibrator
    tasks: TaskQueue
    updates: UpdateCheck
    #: The remote vector service (CPERSONA_VECTOR_SEARCH_MODE=remote), or None.
    remote: RemoteVectors | None
    #: The full-text indexes of the Rust core; empty where FTS5 answers the FTS arms.
    fts: dict[str, FtsIndex]
    #: Which model embeds for which table: the one that made its stored vectors.
    router: ModelRouter


class Engine:
    """Opened once per server process (or per test) and closed at shutdown."""

    def __init__(self, settings: Settings, *, embedder: EmbeddingProvider | None = None) -> None:
        self.settings = settings
        self._given_embedder = embedder
        tracer = None
        if settings.sql_trace:
            tracer = _sql_tracer if settings.secrets == "allow" else _redacted_sql_tracer
        self.db: Store = open_database(
            settings.db_path,
            fts_enabled=settings.fts_enabled,
            tracer=tracer,
            database_url=settings.database_url,
            pool_size=settings.pg_pool_size,
            connect_timeout=settings.pg_connect_timeout_seconds,
            vector_index=host_vector_index(settings),
        )
        self._services: Services | None = None
        self._services_lock = threading.Lock()
        self._calibration: threading.Thread | None = None
        self._closed = threading.Event()
        self._warmup: threading.Thread | None = None
        self._background_started = False
        #: The no-persist pauses (surface.md §10), in the database when servers share it, and
        #: the operating context.
        self.pause = Pauses(
            db=self.db if self.db.capabilities.shared else None,
            share_transport=settings.transport == "streamable-http",
        )
        #: The tool calls in flight, which background work gives way to (yielding.py).
        self.activity = CallActivity()
        self.operating_context = OperatingContext(settings)
        #: `initialize.instructions`: the OC summary, read once at start (surface.md §1.1).
        self.instructions = self.operating_context.instructions()

    def count_memories(self) -> int:
        """The memories stored (the start-up banner's note on index files still to build)."""
        return counts.memory_count(self.db)

    def stored_model_differs(self) -> bool:
        """Whether a table holds vectors that are not recorded as the configured embedded
        model's (another model's, or not recorded at all), read from SQLite alone: only then
        does start-up build the services to say so (`router.notice()`)."""
        from cpersona.config import LOCAL_MODEL_NAMES
        from cpersona.storage import vector_models

        expected = LOCAL_MODEL_NAMES.get(self.settings.embedding_provider)
        record, _ = vector_models.read(self.db)
        for table in vector_models.TABLES:
            if not vector_models.table_has_vectors(self.db, table):
                continue
            stored = record.get(table)
            if stored is None or expected is None or stored.model != expected:
                return True
        return False

    def _build(self) -> Services:
        from cpersona.embedding.cache import CachedProvider
        from cpersona.embedding.routing import ModelRouter, QueryModel, local_provider
        from cpersona.memory.writes import Writer
        from cpersona.retrieval.advisory import EmbeddingHealth
        from cpersona.retrieval.calibration import Calibrator
        from cpersona.retrieval.channels import IndexFiles
        from cpersona.retrieval.pipeline import Recaller, RecallParts
        from cpersona.retrieval.sidecar import DatabaseSidecar, Sidecar, sidecar_path
        from cpersona.retrieval.thresholds import Thresholds
        from cpersona.tasks import TaskQueue
        from cpersona.update import UpdateCheck
        from cpersona.vectors.remote import RemoteVectors

        settings = self.settings
        embedder = self._given_embedder
        if embedder is None:
            from cpersona.embedding import make_provider

            embedder = make_provider(settings)
        if not isinstance(embedder, CachedProvider):
            embedder = CachedProvider(
                embedder, size=settings.embedding_cache_size, ttl=settings.embedding_cache_ttl
            )
        caps = self.db.capabilities
        indexes = vector_indexes(self.db, settings, self.activity)
        fts = full_text_indexes(self.db, settings, self.activity)
        remote = RemoteVectors.from_settings(settings)
        if remote is not None and not settings.store_blob:
            log.info(
                "remote vector mode without local memory vectors (CPERSONA_STORE_BLOB=false): "
                "while %s is down, recall has full-text and keyword search only",
                remote.base,
            )
        if caps.shared:
            # Servers on many hosts share the database: the calibration lives in it, so each
            # starts from the same one and a backup of the database holds it.
            sidecar: Sidecar = DatabaseSidecar(self.db)
        else:
            sidecar = Sidecar(None if self.db.is_memory else sidecar_path(settings.db_path))
        #: Which model embeds for which table: the one that made its stored vectors.
        router = ModelRouter(
            self.db,
            embedder,
            cache_size=settings.embedding_cache_size,
            cache_ttl=settings.embedding_cache_ttl,
            make_local=lambda name: local_provider(name, settings.embedding_threads),
        )
        if embedder.available:
            loaded = sidecar.load().payload
            router.identify(loaded.embedding_model if loaded is not None else "")
        writer = Writer(self.db, settings, router, after_write=self.after_write, remote=remote)
        thresholds = Thresholds(global_threshold=settings.vector_min_similarity)
        health = EmbeddingHealth(settings.transport)
        files = IndexFiles(indexes, fts)
        parts = RecallParts(router, thresholds, health, files, remote)
        recaller = Recaller(self.db, settings, parts)
        calibrator = Calibrator(
            self.db,
            settings,
            QueryModel(router),
            thresholds,
            recaller,
            sidecar,
            self.activity,
        )
        return Services(
            embedder=embedder,
            indexes=indexes,
            writer=writer,
            thresholds=thresholds,
            health=health,
            recaller=recaller,
            calibrator=calibrator,
            tasks=TaskQueue(self.db, settings, writer, self.pause),
            updates=UpdateCheck(settings),
            remote=remote,
            fts=fts,
            router=router,
        )

    @property
    def services(self) -> Services:
        """The services, built by the first caller (tool calls run on several threads)."""
        services = self._services
        if services is None:
            with self._services_lock:
                if self._services is None:
                    self._services = self._build()
                services = self._services
        return services

    # Read through `services`, so that the first to read one builds them all.
    embedder: Forwarded[CachedProvider] = Forwarded("services")
    indexes: Forwarded[dict[str, VectorIndex]] = Forwarded("services")
    writer: Forwarded[Writer] = Forwarded("services")
    thresholds: Forwarded[Thresholds] = Forwarded("services")
    health: Forwarded[EmbeddingHealth] = Forwarded("services")
    recaller: Forwarded[Recaller] = Forwarded("services")
    calibrator: Forwarded[Calibrator] = Forwarded("services")
    tasks: Forwarded[TaskQueue] = Forwarded("services")
    remote: Forwarded[RemoteVectors | None] = Forwarded("services")
    fts: Forwarded[dict[str, FtsIndex]] = Forwarded("services")
    router: Forwarded[ModelRouter] = Forwarded("services")
    updates: Forwarded[UpdateCheck] = Forwarded("services")

    def start_background(self) -> None:
        """The server's background work, once: index warm-up, calibration, the legacy task queue.

        A stdio server starts it with its first tool call rather than at spawn, so that
        `initialize` and `tools/list` are answered before any of it (and numpy) is loaded.
        """
        if self._background_started or self._closed.is_set():
            return
        self._background_started = True
        self.start_index_warmup()
        self.start_calibration()
        self.tasks.start()  # drains legacy pending_memory_tasks rows (surface.md §9.6)

    def after_write(self) -> None:
        """Bring the derived indexes current after a committed write."""
        # The index is current after every acknowledged write (a crash before this point is
        # repaired by the next reader's sync: the log entry was committed with the row).
        self.recaller.invalidate_stats()
        # issue 32 hook: an import or merge may have carried declarations.
        self.recaller.supersession.invalidate()
        for index in self.derived_indexes():
            try:
                index.after_write()
            except OSError as exc:
                # The row is committed and the index is derived: a full disk or an obstructed
                # index path must not turn a done write into an error (scans read SQLite, and
                # the next sync catches up). One line, no traceback: it repeats per write.
                log.warning("the %s %s index is behind SQLite: %s", index.table, index.kind, exc)

    def derived_indexes(self) -> list[DerivedIndex[Any, Any, Any]]:
        """Every index file kept from the database's change logs, vector files first."""
        return [*self.indexes.values(), *self.fts.values()]

    def warm_indexes(self) -> None:
        """Bring the index files current (rebuilding a missing one), the full-text indexes
        into memory."""
        for index in self.derived_indexes():
            if self._closed.is_set():
                return
            try:
                index.sync()
            except OSError as exc:  # a full disk, an obstructed path: said in one line
                log.warning("could not bring the %s index current: %s", index.table, exc)
            except Exception:
                log.exception("could not bring the %s index current", index.table)

    def start_index_warmup(self) -> threading.Thread:
        """`warm_indexes` in the background; `close()` waits for it.

        Shutdown must not race it: a daemon thread still writing the mapped index file while
        the interpreter finalises crashed the process (SIGSEGV) on a quick stdin EOF.
        """
        if self._warmup is None:
            self._warmup = threading.Thread(
                target=self.warm_indexes, name="cpersona-index", daemon=True
            )
            self._warmup.start()
        return self._warmup

    def start_calibration(self) -> threading.Thread | None:
        """Restore or recalibrate thresholds and gates in the background (retrieval.md §15.2).

        Only with embeddings; serving never waits for it. Returns the thread (tests join it).
        """
        if not self.calibrator.embedder.available or self._calibration is not None:
            return self._calibration
        self._calibration = threading.Thread(
            target=self._calibrate_at_start, name="cpersona-calibration", daemon=True
        )
        self._calibration.start()
        return self._calibration

    def _calibrate_at_start(self) -> None:
        from cpersona.retrieval.calibration import CalibrationStopped

        try:
            self.calibrator.startup()
        except CalibrationStopped:
            pass
        except Exception:
            if not self._closed.is_set():  # a closing engine pulls the database away: expected
                log.exception("startup calibration failed; recall keeps the heuristic gate")

    def close(self) -> None:
        if self._closed.is_set():
            return
        self._closed.set()
        with self._services_lock:  # a call still building them finishes first
            services = self._services
        if services is None:  # nothing beyond the database was ever used
            self.db.close()
            return
        services.calibrator.stopping.set()
        services.tasks.stop()
        if self._warmup is not None:
            # A rebuild of a large index takes seconds; it is bounded by the table's size.
            self._warmup.join(timeout=120.0)
        if self._calibration is not None:
            # It checks `stopping` between pseudo-recalls and agents; don't hang shutdown on it.
            self._calibration.join(timeout=5.0)
        try:
            services.embedder.close()
            services.router.close()
        finally:
            for index in services.indexes.values():
                index.close()
            for fts in services.fts.values():
                fts.close()
            self.db.close()


def host_vector_index(settings: Settings) -> bool:
    """Whether the vector arm of a PostgreSQL database reads a host-local index file, as on
    SQLite (issue 19): with the Rust core (the numpy twin would scan slower than pgvector) and
    a cache directory whose locks hold (a local disk, not NFS: derived/placement.py). Otherwise, and
    always while a file is rebuilt, the vectors are scanned in the database. Cheap: no
    import of the core or numpy here (start-up, docs/notes/performance-notes.md)."""
    import importlib.util

    from cpersona.derived.placement import cache_problem

    if not settings.database_url or not settings.pg_vector_index or settings.kernel == "numpy":
        return False
    if importlib.util.find_spec("cpersona._core") is None:
        return False
    problem = cache_problem(settings.cache_dir)
    if problem:
        log.warning("vectors are scanned in PostgreSQL, not from this host's index: %s", problem)
        return False
    return True


def vector_indexes(
    db: Store, settings: Settings, activity: CallActivity | None = None
) -> dict[str, VectorIndex]:
    """The vector index files this process scans (docs/vector-index.md): none where the vector
    arm runs in the database; beside an SQLite file, or in this host's cache directory for a
    shared database, whose log keeps entries for the files of other hosts."""
    from cpersona.derived.placement import SHARED_KEEP_LOG, cache_base
    from cpersona.vectors.index import VectorIndex

    caps = db.capabilities
    if caps.vector_arm != "index_file":
        return {}
    base = cache_base(settings.cache_dir, db.path) if caps.derived_files == "host_cache" else None
    keep_log = SHARED_KEEP_LOG if caps.shared else 0
    return {
        table: VectorIndex(db, table, activity=activity, base=base, keep_log=keep_log)
        for table in ("memories", "episodes")
    }


def full_text_indexes(
    db: Store, settings: Settings, activity: CallActivity | None = None
) -> dict[str, FtsIndex]:
    """The full-text indexes this process serves the FTS arms from (docs/fts-index.md).

    SQLite: the files next to the database, or none (FTS5 answers: CPERSONA_FTS_INDEX=false,
    no Rust core); a large rebuild runs in the background, giving way to `activity`'s calls.
    PostgreSQL has no FTS5: the index is the arm, its files in this host's cache directory
    (rebuilt inside the call: nothing else gives the same rows), and settings that leave it out
    are refused (`Settings.full_text_problem`).
    """
    from cpersona import _backend
    from cpersona.derived.placement import SHARED_KEEP_LOG, cache_base
    from cpersona.errors import ConfigError
    from cpersona.fts.index import open_fts_indexes

    kernels = _backend.load(settings.kernel)
    caps = db.capabilities
    base = cache_base(settings.cache_dir, db.path) if caps.derived_files == "host_cache" else None
    keep_log = SHARED_KEEP_LOG if caps.shared else 0
    if caps.full_text_in_database:
        enabled = settings.fts_enabled and settings.fts_index
        return open_fts_indexes(
            db,
            enabled=enabled,
            kernels=kernels,
            base=base,
            keep_log=keep_log,
            activity=activity,
        )
    if not settings.fts_enabled:
        return {}
    problem = settings.full_text_problem()
    if problem:
        raise ConfigError(problem)
    fts = open_fts_indexes(
        db, enabled=True, kernels=kernels, base=base, keep_log=keep_log, background=False
    )
    if not fts:
        raise ConfigError(settings.full_text_problem("numpy"))
    return fts


def _sql_tracer(sql: str, params: object) -> None:
    log.debug("sql: %s", sql)


def _redacted_sql_tracer(sql: str, params: object) -> None:
    # The trace shows statements with their values bound: a recall by a token would put the
    # token in the log, which CPERSONA_SECRETS promises to keep credentials out of (issue 22).
    from cpersona.credentials.detect import redact

    log.debug("sql: %s", redact(sql)[0])
