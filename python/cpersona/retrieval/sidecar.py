"""The calibration sidecar `<db>.calibration.json` (retrieval.md §15.1, surface.md §7.6).

Calibrated thresholds, fused gates and precision overrides survive a restart through this
file. Several processes may serve one database (one stdio server per MCP client), so a write
merges: the entries this process owns (it loaded or wrote them) overwrite or delete, and every
other entry of the stored file is carried forward. A stored payload measured at another
embedding width or under another scoring version is never carried or restored.

Writes go to `<path>.tmp.<pid>` and are renamed over the file, so a reader never sees half a
file. New files are owner-only (0600); an existing file keeps its mode. An in-memory database
has no sidecar: every operation here is then a no-op.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import re
import threading
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from cpersona import private_files
from cpersona.storage import Store
from cpersona.storage import meta as meta_sql

log = logging.getLogger("cpersona.calibration")

#: Fingerprint of the scores the calibrated values were measured on. A change of the scoring
#: (fusion, penalty, confidence) moves every gate, so a sidecar from another version is stale.
#: cpersona scores as CPersona 2.5.12 does and keeps its value, so a drop-in replacement
#: restores the calibration 2.5.12 wrote.
SCORING_VERSION = "255a3-episode-penalty-exempt"

#: Per-agent maps and process-wide values, in the file's key order.
AGENT_MAPS = ("agent_thresholds", "agent_fused_gates", "agent_betas")
GLOBALS = ("global_threshold", "global_fused_gate", "fused_gate_signal")
SIGNALS = ("confidence", "rsf", "rrf", "cosine")

#: Backups taken before a recalibration replaces a stale or unreadable file.
BACKUPS_KEPT = 5
_BACKUP = re.compile(r"\.before-(?P<label>.+)-(?P<stamp>\d{8}-\d{6})$")

#: What a process owns: ("global_threshold", "") for a global, ("agent_betas", agent) for an entry.
Owned = set[tuple[str, str]]


@dataclass
class Payload:
    """The sidecar's content."""

    embedding_dim: int | None = None
    embedding_model: str = ""
    scoring_version: str | None = SCORING_VERSION
    global_threshold: float | None = None
    agent_thresholds: dict[str, float] = field(default_factory=dict)
    global_fused_gate: float | None = None
    agent_fused_gates: dict[str, float] = field(default_factory=dict)
    fused_gate_signal: str | None = None
    agent_betas: dict[str, float] = field(default_factory=dict)
    calibrated_at: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The file's object: every field, in their order (the maps copied)."""
        return asdict(self)

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> Payload:
        """Read a stored object leniently: an entry of the wrong type is dropped, not fatal."""
        dim = obj.get("embedding_dim")
        version = obj.get("scoring_version")
        signal = obj.get("fused_gate_signal")
        model = obj.get("embedding_model")
        stamp = obj.get("calibrated_at")
        return cls(
            embedding_dim=dim if isinstance(dim, int) and not isinstance(dim, bool) else None,
            embedding_model=model if isinstance(model, str) else "",
            scoring_version=version if isinstance(version, str) else None,
            global_threshold=_number(obj.get("global_threshold")),
            agent_thresholds=_number_map(obj.get("agent_thresholds")),
            global_fused_gate=_number(obj.get("global_fused_gate")),
            agent_fused_gates=_number_map(obj.get("agent_fused_gates")),
            fused_gate_signal=signal if signal in SIGNALS else None,
            agent_betas=_number_map(obj.get("agent_betas")),
            calibrated_at=stamp if isinstance(stamp, str) else None,
        )


def _number(value: Any) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def _number_map(value: Any) -> dict[str, float]:
    if not isinstance(value, dict):
        return {}
    out = {}
    for key, raw in value.items():
        number = _number(raw)
        if isinstance(key, str) and number is not None:
            out[key] = number
    return out


@dataclass(frozen=True, slots=True)
class Loaded:
    """What is on disk: nothing, something that is not a sidecar, or a payload."""

    state: Literal["missing", "unreadable", "ok"]
    payload: Payload | None = None


def sidecar_path(db_path: str) -> str | None:
    """`<db>.calibration.json`, or None for an in-memory database (it keeps no sidecar)."""
    if db_path == ":memory:" or db_path.startswith("file::memory:"):
        return None
    return db_path + ".calibration.json"


class Sidecar:
    """Reads, merge-writes and backs up one sidecar file (thread-safe within a process)."""

    def __init__(self, path: str | None) -> None:
        self.path = path
        self._lock = threading.Lock()

    def load(self) -> Loaded:
        if self.path is None:
            return Loaded("missing")
        try:
            text = Path(self.path).read_text(encoding="utf-8")
        except FileNotFoundError:
            return Loaded("missing")
        except (OSError, UnicodeDecodeError) as exc:
            log.warning("calibration sidecar %s cannot be read: %s", self.path, exc)
            return Loaded("unreadable")
        return _parse(text)

    def write(self, payload: Payload, owned: Owned) -> bool:
        """Merge `payload` into the stored file and replace it atomically; False if not written.

        `owned` names the entries this process loaded or wrote: those are taken from
        `payload` (present = overwrite, absent = delete); the stored file's other entries are
        carried forward when it was measured at the same width under the same version.
        """
        if self.path is None:
            return False
        with self._lock:
            out = merged(self.load(), payload, owned)
            try:
                self._replace(json.dumps(out, indent=2, ensure_ascii=False) + "\n")
            except OSError as exc:
                log.warning("calibration sidecar %s was not written: %s", self.path, exc)
                return False
            return True

    def _replace(self, text: str) -> None:
        assert self.path is not None
        try:
            mode = os.stat(self.path).st_mode & 0o777
        except FileNotFoundError:
            mode = 0o600
        tmp = f"{self.path}.tmp.{os.getpid()}"
        fd = private_files.recreate(tmp)
        try:
            os.fchmod(fd, mode)  # an existing file's mode is the operator's
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(text)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise

    def backup(self, label: str, now: datetime | None = None) -> str | None:
        """Copy the current file to `<path>.before-<label>-<YYYYmmdd-HHMMSS>`; None if absent.

        One backup per label (a newer copy replaces the older), the newest BACKUPS_KEPT kept.
        """
        if self.path is None:
            return None
        label = re.sub(r"[^A-Za-z0-9._-]", "_", label)[:64] or "unversioned"
        stamp = (now or datetime.now(UTC)).strftime("%Y%m%d-%H%M%S")
        target = f"{self.path}.before-{label}-{stamp}"
        with self._lock:
            try:
                data = Path(self.path).read_bytes()
            except FileNotFoundError:
                return None
            existing = self.backups()
            fd = private_files.recreate(target)
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            for path, old_label, _ in existing:
                if old_label == label and path != target:
                    _unlink(path)
            kept = sorted(self.backups(), key=lambda b: (b[2], b[0]), reverse=True)
            for path, _, _ in kept[BACKUPS_KEPT:]:
                _unlink(path)
        return target

    def backups(self) -> list[tuple[str, str, str]]:
        """(path, label, stamp) of every backup beside the sidecar."""
        if self.path is None:
            return []
        folder = Path(self.path).parent
        prefix = Path(self.path).name + ".before-"
        out = []
        for name in os.listdir(folder):  # not glob: the path may hold glob metacharacters
            if name.startswith(prefix):
                match = _BACKUP.search(name[len(prefix) - len(".before-") :])
                if match:
                    out.append((str(folder / name), match["label"], match["stamp"]))
        return out


def merged(stored: Loaded, payload: Payload, owned: Owned) -> dict[str, Any]:
    """`payload` merged over the `stored` sidecar: see `Sidecar.write`."""
    out = payload.to_json()
    base = stored.payload if stored.state == "ok" else None
    if base is not None and out["embedding_dim"] is None:
        out["embedding_dim"] = base.embedding_dim
    if (
        base is not None
        and base.embedding_dim == out["embedding_dim"]
        and base.scoring_version == out["scoring_version"]
    ):
        old = base.to_json()
        for key in GLOBALS:
            if (key, "") not in owned:
                out[key] = old[key]
        for key in AGENT_MAPS:
            merged_map = {a: v for a, v in old[key].items() if (key, a) not in owned}
            merged_map.update(out[key])
            out[key] = merged_map
    return out


def _parse(text: str | bytes) -> Loaded:
    try:
        obj = json.loads(text)
    except ValueError:
        return Loaded("unreadable")
    if not isinstance(obj, dict):
        return Loaded("unreadable")
    return Loaded("ok", Payload.from_json(obj))


class DatabaseSidecar(Sidecar):
    """The sidecar's content kept in the database itself (`cpersona_meta`), for a database
    that many hosts share (PostgreSQL, docs/scale-out.md): every server process reads the same
    calibration at start-up and a backup of the database holds it. A write merges inside the
    database's write transaction, so processes on any host merge exactly as processes beside
    one file do; backups are entries `<KEY>.before-<label>-<stamp>`, the newest BACKUPS_KEPT
    kept. A database error propagates (a memory's write would fail the same way)."""

    KEY = "calibration"

    def __init__(self, db: Store) -> None:
        super().__init__(f"{db.path} (cpersona_meta {self.KEY!r})")
        self.db = db

    def load(self) -> Loaded:
        return self._load(meta_sql.read(self.db))

    def _load(self, entries: meta_sql.Entries) -> Loaded:
        value = entries.get(self.KEY)
        if value is None:
            return Loaded("missing")
        try:
            return _parse(value.decode("utf-8"))
        except UnicodeDecodeError:
            return Loaded("unreadable")

    def write(self, payload: Payload, owned: Owned) -> bool:
        with self._lock, meta_sql.edit(self.db) as entries:
            out = merged(self._load(entries), payload, owned)
            text = json.dumps(out, indent=2, ensure_ascii=False) + "\n"
            entries.put(self.KEY, text.encode("utf-8"))
        return True

    def backup(self, label: str, now: datetime | None = None) -> str | None:
        label = re.sub(r"[^A-Za-z0-9._-]", "_", label)[:64] or "unversioned"
        stamp = (now or datetime.now(UTC)).strftime("%Y%m%d-%H%M%S")
        target = f"{self.KEY}.before-{label}-{stamp}"
        with self._lock, meta_sql.edit(self.db) as entries:
            value = entries.get(self.KEY)
            if value is None:
                return None
            existing = self._backups(entries)
            entries.put(target, value)
            for key, old_label, _ in existing:
                if old_label == label and key != target:
                    entries.delete(key)
            kept = sorted(self._backups(entries), key=lambda b: (b[2], b[0]), reverse=True)
            for key, _, _ in kept[BACKUPS_KEPT:]:
                entries.delete(key)
        return target

    def backups(self) -> list[tuple[str, str, str]]:
        return self._backups(meta_sql.read(self.db))

    def _backups(self, entries: meta_sql.Entries) -> list[tuple[str, str, str]]:
        out = []
        for key in entries.keys(f"{self.KEY}.before-"):
            match = _BACKUP.search(key[len(self.KEY) :])
            if match:
                out.append((key, match["label"], match["stamp"]))
        return out


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except OSError as exc:  # pragma: no cover - best effort pruning
        log.warning("could not remove old calibration backup %s: %s", path, exc)


def backup_label(loaded: Loaded) -> str:
    """The `<version>` part of a backup name: the stored scoring version, or why there is none."""
    if loaded.state == "unreadable" or loaded.payload is None:
        return "unreadable"
    return loaded.payload.scoring_version or "unversioned"
