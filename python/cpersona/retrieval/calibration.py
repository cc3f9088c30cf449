"""Calibration of the vector threshold and the fused gate, and the precision knob (§15).

The vector threshold separates a null distribution (dot products of random pairs of stored
vectors: what unrelated memories score) from positives (memories written close together in
time, or each vector's nearest neighbour). The fused gate does the same on the score recall's
gate actually reads (confidence, rsf or rrf), measured by pseudo-recalls that use stored
memories as queries. `set_recall_precision` moves the fused gate by changing beta, the weight of
specificity in the separation objective.

Recall never waits for any of this: until values land it uses CPERSONA_VECTOR_MIN_SIMILARITY
and the heuristic gate (§15.2).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import numpy as np

from cpersona.config import PRECISION_BETAS, Settings
from cpersona.memory.text import parse_utc
from cpersona.retrieval.candidates import Candidate
from cpersona.retrieval.pipeline import QueryVector
from cpersona.retrieval.scoring import signal_of
from cpersona.retrieval.separation import (
    admit_rate,
    decode_modal,
    gram_stats,
    quantile,
    round4,
    sep,
    temporal_positives,
)
from cpersona.retrieval.sidecar import (
    SCORING_VERSION,
    Loaded,
    Owned,
    Payload,
    Sidecar,
    backup_label,
)
from cpersona.retrieval.thresholds import (
    MIN_EMBEDDINGS,
    Thresholds,
    fused_signal,
    gate_floor,
    precision_label,
)
from cpersona.storage import Store
from cpersona.storage import calibration as cal_sql
from cpersona.yielding import CallActivity, GiveWay

log = logging.getLogger("cpersona.calibration")

METHODS = ("percentile", "separation", "zscore")
#: Fused-gate draws need this many null and positive scores.
MIN_NULL_SCORES = 10
MIN_POS_SCORES = 5
#: Rows each pseudo-recall fetches (§15.4).
PSEUDO_RECALL_LIMIT = 20
#: Pseudo-queries embedded per step of the startup run (it gives way between steps).
EMBED_STEP = 8


# -- the service -----------------------------------------------------------------------------


class CalibrationStopped(Exception):
    """The engine is closing; a running calibration gives up."""


@dataclass(frozen=True, slots=True)
class _Scored:
    """What one pseudo-recall row contributes to a draw."""

    value: float
    positive: bool


@dataclass(eq=False)
class Calibrator:
    """Runs calibrations, applies them to `Thresholds` and keeps the sidecar in step."""

    db: Store
    settings: Settings
    embedder: Any
    thresholds: Thresholds
    recaller: Any
    sidecar: Sidecar
    #: Callers' tool calls, which the startup run gives way to (yielding.py).
    activity: CallActivity | None = None
    #: Width the values in memory were measured at (loaded or calibrated).
    embedding_dim: int | None = field(init=False, default=None)
    #: Sidecar entries this process loaded or wrote (see sidecar.Sidecar.write).
    owned: Owned = field(init=False, default_factory=set)
    stopping: threading.Event = field(init=False, default_factory=threading.Event)
    # One calibration at a time: a tool call waits for at most one agent of the startup run.
    _lock: threading.RLock = field(init=False, default_factory=threading.RLock)
    #: Set while the startup run works: the pauses between its steps.
    _give_way: GiveWay | None = field(init=False, default=None)
    #: Calibrations queued for `_lock`: a caller waiting makes the startup run unthrottled.
    _queued: int = field(init=False, default=0)
    _queued_lock: threading.Lock = field(init=False, default_factory=threading.Lock)

    # -- calibrate_threshold (§15.3) ---------------------------------------------------------

    def calibrate(
        self,
        agent_id: str,
        sample_size: int = 0,
        z_factor: float = 0.0,
        method: str = "",
        percentile: float = 0.0,
        *,
        paused: bool = False,
    ) -> dict[str, Any]:
        """Re-derive `agent_id`'s vector threshold (global for "") and its fused gate.

        `paused` is the no-persist hook (issue 5): arguments are validated, then nothing is
        computed or changed and the success shape comes back with its computed fields empty;
        the caller adds the pause markers.
        """
        s = self.settings
        n = max(1, min(sample_size or s.calibrate_sample_size, s.calibrate_max_sample))
        z = min(10.0, max(-10.0, float(z_factor or s.calibrate_z_factor)))
        method = method or s.calibrate_method
        given = percentile or s.calibrate_percentile
        p = given / 100 if given > 1 else given
        if not 0 < p <= 1:
            return _fail(f"percentile must be in (0, 1] (or a percent 1-100), got {given:g}")
        if method not in METHODS:
            return _fail(f"Invalid method '{method}'. Supported: {', '.join(METHODS)}")
        head: dict[str, Any] = {
            "ok": True,
            "sidecar_persisted": False,
            "scope": "per_agent" if agent_id else "global",
            "agent_id": agent_id,
        }
        if paused:
            return {
                **head,
                "sampled_embeddings": 0,
                "num_pairs": 0,
                "method": method,
                "z_factor": z,
                "percentile": p,
                "embedding_dim": None,
                "embedding_model": self.embedder.name,
                "distribution": None,
                "null_admit_rate": None,
                "old_threshold": self._old_threshold(agent_id),
                "new_threshold": None,
            }
        with self._queued_lock:
            self._queued += 1
        try:
            self._lock.acquire()
        finally:
            with self._queued_lock:
                self._queued -= 1
        try:
            return self._calibrate(head, agent_id, n, z, method, p)
        finally:
            self._lock.release()

    def _step(self) -> None:
        """A boundary between two small steps of work: the startup run gives way here."""
        if self._give_way is not None:
            self._give_way.pause()

    def _calibrate(
        self, head: dict[str, Any], agent_id: str, n: int, z: float, method: str, p: float
    ) -> dict[str, Any]:
        s = self.settings
        blobs = cal_sql.sample_embeddings(self.db, agent_id, n)
        if len(blobs) < MIN_EMBEDDINGS:
            return _fail(f"Need at least {MIN_EMBEDDINGS} embeddings, found {len(blobs)}")
        vectors = decode_modal(blobs)
        if vectors.shape[0] < MIN_EMBEDDINGS:
            found = vectors.shape[0]
            return _fail(f"Need at least {MIN_EMBEDDINGS} same-dimension embeddings, found {found}")
        width = int(vectors.shape[1])
        x, nn = gram_stats(vectors)
        xs = np.sort(x)
        mean = float(x.mean())
        extra: dict[str, Any] = {}
        if method == "zscore":
            raw = mean + z * float(x.std())
        elif method == "percentile":
            raw = quantile(xs, p)
        else:
            rows = cal_sql.newest_timed_embeddings(self.db, agent_id, n)
            y = temporal_positives(rows, width, s.calibrate_temporal_window_min * 60.0)
            proxy = "temporal"
            if y.shape[0] < MIN_EMBEDDINGS:
                y, proxy = nn, "nn_fallback"
            raw, youden = sep(x, y, s.calibrate_floor, 1.0)
            extra = {"proxy_source": proxy, "youden_j": round4(youden)}
        threshold = round4(max(raw, s.calibrate_floor))
        if method == "separation":
            ys = np.sort(y)
            extra["pos_admit_rate"] = round4(admit_rate(ys, ys.shape[0], threshold))
            extra["pos_mean"] = round4(float(y.mean()))
        old = self._old_threshold(agent_id)
        with self.thresholds.lock:
            if agent_id:
                self.thresholds.agent_thresholds[agent_id] = threshold
                self.owned.add(("agent_thresholds", agent_id))
            else:
                self.thresholds.global_threshold = threshold
                self.owned.add(("global_threshold", ""))
        self.embedding_dim = width
        gate = self._calibrate_gate(agent_id) if agent_id and s.fused_gate_enabled else None
        persisted = self.persist()
        out = {
            **head,
            "sidecar_persisted": persisted,
            "sampled_embeddings": int(vectors.shape[0]),
            "num_pairs": int(x.shape[0]),
            "method": method,
            "z_factor": z,
            "percentile": p,
            "embedding_dim": width,
            "embedding_model": self.embedder.name,
            "distribution": {
                "mean": round4(mean),
                "std": round4(float(x.std())),
                "median": round4(quantile(xs, 0.5)),
                "p95": round4(quantile(xs, 0.95)),
            },
            "null_admit_rate": round4(admit_rate(xs, xs.shape[0], threshold)),
            "old_threshold": old,
            "new_threshold": threshold,
            **extra,
        }
        if gate is not None:
            out["fused_gate"] = gate
        return out

    def _old_threshold(self, agent_id: str) -> float:
        with self.thresholds.lock:
            if agent_id:
                value = self.thresholds.agent_thresholds.get(
                    agent_id, self.thresholds.global_threshold
                )
            else:
                value = self.thresholds.global_threshold
        return round4(value)

    # -- the fused gate (§15.3 step 8, §15.4) ------------------------------------------------

    def beta(self, agent_id: str) -> float:
        """The agent's precision override, else the global CPERSONA_FUSED_GATE_BETA."""
        with self.thresholds.lock:
            return self.thresholds.agent_betas.get(agent_id, self.settings.fused_beta)

    def _calibrate_gate(self, agent_id: str) -> dict[str, Any] | None:
        """Median of the draws; stored for the agent on success, untouched otherwise."""
        try:
            stats = self.fused_gate(agent_id, self.beta(agent_id))
        except CalibrationStopped:
            raise
        except Exception:
            log.exception("fused-gate calibration of %r failed; the heuristic gate stays", agent_id)
            return None
        if stats is None:
            return None
        with self.thresholds.lock:
            self.thresholds.agent_fused_gates[agent_id] = stats["threshold"]
            self.thresholds.fused_gate_signal = stats["signal"]
        self.owned.update({("agent_fused_gates", agent_id), ("fused_gate_signal", "")})
        return stats

    def fused_gate(self, agent_id: str, beta: float) -> dict[str, Any] | None:
        """CPERSONA_FUSED_GATE_CALIBRATION_DRAWS draws and their upper median; None if none held."""
        signal = fused_signal(self.settings)
        if signal is None or not self.embedder.available:
            return None
        memo: dict[int, list[_Scored]] = {}
        draws = []
        for _ in range(self.settings.fused_gate_calibration_draws):
            stats = self.draw(agent_id, beta, signal, memo)
            if stats is not None:
                draws.append(stats)
        if not draws:
            return None
        draws.sort(key=lambda d: d["threshold"])
        out = dict(draws[len(draws) // 2])
        if len(draws) > 1:
            out["threshold_draws"] = [d["threshold"] for d in draws]
        return out

    def draw(
        self,
        agent_id: str,
        beta: float,
        signal: str,
        memo: dict[int, list[_Scored]] | None = None,
    ) -> dict[str, Any] | None:
        """One §15.4 draw: pseudo-recalls from random memories of the agent, then `sep`.

        `memo` keeps each query memory's scored rows across the draws of one calibration (a
        small corpus draws the same memories every time; recomputing them changes nothing).
        """
        s = self.settings
        memo = {} if memo is None else memo
        queries = []
        for q in cal_sql.pseudo_queries(self.db, agent_id, s.fused_gate_sample_queries):
            t = parse_utc(q.timestamp)
            if q.content.strip() and t is not None:
                queries.append((q, t))
        todo = [(q, t) for q, t in queries if q.id not in memo]
        if todo:
            tables = self.embedder.tables()
            qvecs: list[np.ndarray] = []
            for start in range(0, len(todo), EMBED_STEP):
                self._step()
                chunk = todo[start : start + EMBED_STEP]
                qvecs.extend(self.embedder.embed([q.content for q, _ in chunk], kind="query"))
            window = s.calibrate_temporal_window_min * 60.0
            for (q, t), qvec in zip(todo, qvecs, strict=True):
                if self.stopping.is_set():
                    raise CalibrationStopped
                self._step()
                rows = self.recaller.score_without_gate(
                    agent_id,
                    q.content,
                    PSEUDO_RECALL_LIMIT,
                    qvec=QueryVector(np.ascontiguousarray(qvec, dtype=np.float32), tables),
                )
                memo[q.id] = _scored(rows, q.id, t, signal, window)
        null = [r.value for q, _ in queries for r in memo[q.id] if not r.positive]
        pos = [r.value for q, _ in queries for r in memo[q.id] if r.positive]
        if len(null) < MIN_NULL_SCORES or len(pos) < MIN_POS_SCORES:
            return None
        raw, youden = sep(null, pos, gate_floor(s, signal), beta)
        threshold = round4(raw)
        xs = np.sort(np.asarray(null, dtype=np.float64))
        ys = np.sort(np.asarray(pos, dtype=np.float64))
        return {
            "threshold": threshold,
            "signal": signal,
            "beta": beta,
            "youden_j": round4(youden),
            "queries_run": len(queries),
            "n_null": len(null),
            "n_pos": len(pos),
            "null_admit_rate": round4(admit_rate(xs, len(null), threshold)),
            "pos_admit_rate": round4(admit_rate(ys, len(pos), threshold)),
            "null_mean": round4(float(np.mean(null))),
            "pos_mean": round4(float(np.mean(pos))),
        }

    # -- precision (§15.5, §15.6) ------------------------------------------------------------

    def set_precision(
        self, agent_id: str, precision: str = "", beta: float = 0.0, *, paused: bool = False
    ) -> dict[str, Any]:
        """Set (or clear) the agent's beta, then recalibrate it at once; rolled back on failure.

        `paused` is the no-persist hook (issue 5): validation runs, nothing changes.
        """
        if not agent_id:
            return _fail("agent_id is required")
        if beta > 0:
            value, label, cleared = float(beta), precision_label(float(beta)), False
        elif precision:
            label = precision.lower()
            if label not in PRECISION_BETAS:
                return _fail(
                    f"Unknown precision '{precision}'; expected strict / balanced / lenient"
                )
            value, cleared = PRECISION_BETAS[label], False
        else:
            value, label, cleared = self.settings.fused_beta, "default", True
        base = {"agent_id": agent_id, "precision": label, "beta": value, "cleared": cleared}
        if paused:
            return {"ok": True, **base, "fused_gate": None, "calibrate": None}
        key = ("agent_betas", agent_id)
        with self._lock:
            with self.thresholds.lock:
                previous = self.thresholds.agent_betas.get(agent_id)
                if cleared:
                    self.thresholds.agent_betas.pop(agent_id, None)
                else:
                    self.thresholds.agent_betas[agent_id] = value
            was_owned = key in self.owned
            self.owned.add(key)
            try:
                result = self.calibrate(agent_id)
            except Exception as exc:
                log.exception("calibration after set_recall_precision(%r) failed", agent_id)
                result = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
            if not result.get("ok") or result.get("new_threshold") is None:
                with self.thresholds.lock:
                    if previous is None:
                        self.thresholds.agent_betas.pop(agent_id, None)
                    else:
                        self.thresholds.agent_betas[agent_id] = previous
                if not was_owned:
                    self.owned.discard(key)
                error = result.get("error") or "calibration did not run"
                return {"ok": False, **base, "error": error}
        summary = {k: result[k] for k in ("ok", "scope", "new_threshold", "error") if k in result}
        return {"ok": True, **base, "fused_gate": result.get("fused_gate"), "calibrate": summary}

    def get_precision(self, agent_id: str) -> dict[str, Any]:
        if not agent_id:
            return _fail("agent_id is required")
        with self.thresholds.lock:
            override = self.thresholds.agent_betas.get(agent_id)
        global_beta = self.settings.fused_beta
        beta = global_beta if override is None else override
        return {
            "ok": True,
            "agent_id": agent_id,
            "precision": precision_label(beta),
            "beta": beta,
            "overridden": override is not None,
            "global_precision": precision_label(global_beta),
            "global_beta": global_beta,
        }

    # -- persistence -------------------------------------------------------------------------

    def payload(self) -> Payload:
        with self.thresholds.lock:
            t = self.thresholds
            return Payload(
                embedding_dim=self.embedding_dim,
                embedding_model=self.embedder.name,
                scoring_version=SCORING_VERSION,
                global_threshold=t.global_threshold
                if ("global_threshold", "") in self.owned
                else None,
                agent_thresholds=dict(t.agent_thresholds),
                global_fused_gate=t.global_fused_gate,
                agent_fused_gates=dict(t.agent_fused_gates),
                fused_gate_signal=t.fused_gate_signal,
                agent_betas=dict(t.agent_betas),
                calibrated_at=datetime.now(UTC).isoformat(timespec="seconds"),
            )

    def persist(self) -> bool:
        """Merge this process's values into the sidecar; False when none was written."""
        return self.sidecar.write(self.payload(), set(self.owned))

    def forget_agent(self, agent_id: str) -> bool:
        """Drop the agent's threshold, gate and beta here and in the sidecar (delete_agent_data)."""
        with self._lock:
            self.thresholds.forget_agent(agent_id)
            self.owned.update(
                (m, agent_id) for m in ("agent_thresholds", "agent_fused_gates", "agent_betas")
            )
            return self.persist()

    def restore(self, stored: Payload) -> None:
        """Apply a current, same-width sidecar payload; its entries become this process's own."""
        with self.thresholds.lock:
            t = self.thresholds
            if stored.global_threshold is not None:
                t.global_threshold = stored.global_threshold
                self.owned.add(("global_threshold", ""))
            if stored.global_fused_gate is not None:
                t.global_fused_gate = stored.global_fused_gate
                self.owned.add(("global_fused_gate", ""))
            if stored.fused_gate_signal is not None:
                t.fused_gate_signal = stored.fused_gate_signal
                self.owned.add(("fused_gate_signal", ""))
            for name in ("agent_thresholds", "agent_fused_gates", "agent_betas"):
                values: dict[str, float] = getattr(stored, name)
                getattr(t, name).update(values)
                self.owned.update((name, agent) for agent in values)
        self.embedding_dim = stored.embedding_dim

    # -- startup (§15.2) ---------------------------------------------------------------------

    def live_dim(self) -> int | None:
        """Modal embedding width of all memories (ties -> the wider), in float32 components."""
        widths = {
            w: c for w, c in cal_sql.embedding_widths(self.db).items() if w > 0 and w % 4 == 0
        }
        if not widths:
            return None
        return max(widths, key=lambda w: (widths[w], w)) // 4

    def startup(self) -> list[str]:
        """Restore the sidecar or recalibrate, as §15.2 decides; returns the scopes calibrated.

        Runs in a background thread; recall keeps the heuristic gate until values land.
        """
        if not self.embedder.available:
            return []
        with self._lock:
            if not self._prepare_startup():
                return []
        done = []
        give_way = None
        if self.activity is not None:
            give_way = GiveWay(self.activity, self.stopping, urgent=lambda: self._queued > 0)
            give_way.lower_priority()
        self._give_way = give_way
        begun = time.monotonic()
        try:
            for agent_id in ["", *cal_sql.embedded_agents(self.db)]:
                if self.stopping.is_set():
                    break
                self._step()
                try:
                    result = self.calibrate(agent_id)
                except CalibrationStopped:
                    break
                if result.get("ok"):
                    done.append(agent_id)
                else:
                    log.info(
                        "startup calibration of %r skipped: %s",
                        agent_id or "(global)",
                        result.get("error"),
                    )
        finally:
            self._give_way = None
        if give_way is not None:
            log.info(
                "startup calibration of %d scope(s) took %.1f s, %.1f s of it giving way to calls",
                len(done),
                time.monotonic() - begun,
                give_way.waited,
            )
        return done

    def _prepare_startup(self) -> bool:
        """Restore, preload and back up as §15.2 says; True when a calibration run follows."""
        s = self.settings
        live = self.live_dim()
        loaded: Loaded = self.sidecar.load()
        stored = loaded.payload
        dim_changed = stored is not None and stored.embedding_dim != live
        stale = stored is not None and stored.scoring_version != SCORING_VERSION
        if stored is not None and not dim_changed and not stale and not s.auto_calibrate:
            self.restore(stored)
            if not (s.fused_gate_enabled and stored.fused_gate_signal is None):
                return False
            log.info("calibration restored; no fused-gate signal stored, calibrating the gates")
        elif s.auto_calibrate or (
            s.calibrate_on_model_change and (stored is None or dim_changed or stale)
        ):
            if stored is not None:
                # Precision is policy, not measurement: it survives a recalibration.
                with self.thresholds.lock:
                    self.thresholds.agent_betas.update(stored.agent_betas)
                self.owned.update(("agent_betas", a) for a in stored.agent_betas)
            if loaded.state == "unreadable" or stale or dim_changed:
                where = self.sidecar.backup(backup_label(loaded))
                log.info(
                    "calibration sidecar is %s; backed up to %s, recalibrating",
                    "unreadable" if stored is None else "stale",
                    where,
                )
        else:
            return False
        return True


def _scored(
    rows: list[Candidate], query_id: int, query_time: datetime, signal: str, window: float
) -> list[_Scored]:
    out = []
    for row in rows:
        if row.id <= 0 or (row.kind == "mem" and row.id == query_id):
            continue  # the profile, and the query memory itself (an episode of that id stays)
        if signal_of(row) != signal:
            continue
        t = parse_utc(row.timestamp)
        positive = t is not None and abs((t - query_time).total_seconds()) <= window
        out.append(_Scored(float(getattr(row, signal)), positive))
    return out


def _fail(error: str) -> dict[str, Any]:
    return {"ok": False, "error": error}
