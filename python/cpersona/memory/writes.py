"""The write tools' rules: store (surface.md §5), update, delete, lock, episodes, profiles.

Each function returns the tool's documented response object. Embedding always happens before
the write transaction (a slow model never holds SQLite's write lock); the dedup probes run
once before embedding (so a duplicate costs no embedding) and again inside the transaction,
which makes probe-and-insert atomic across threads and processes. The transactions are
storage/writes.py's: each of its functions opens the one its write must be.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import numpy as np

from cpersona.config import Settings
from cpersona.credentials.policy import Screen
from cpersona.errors import EmbeddingUnavailable
from cpersona.memory.text import (
    normalize_source,
    parse_utc,
    py_json,
    sanitize,
    utc_now_iso,
)
from cpersona.models import Memory, NewEpisode, NewMemory
from cpersona.storage import Store, writes
from cpersona.storage import memories as memory_sql
from cpersona.storage.error_kinds import ConstraintError, unreachable_in
from cpersona.storage.writes import Vector as _Vector
from cpersona.vectors.remote import Item, RemoteVectors

if TYPE_CHECKING:
    from cpersona.embedding.routing import ModelRouter

log = logging.getLogger("cpersona.memory")

AfterWrite = Callable[[], None]


class Writer:
    """Write-side operations over one database and one embedding provider."""

    def __init__(
        self,
        db: Store,
        settings: Settings,
        router: ModelRouter,
        after_write: AfterWrite | None = None,
        remote: RemoteVectors | None = None,
    ) -> None:
        self.db = db
        self.settings = settings
        self.router = router
        self._after_write = after_write
        #: The remote vector service, told after each commit (surface.md §12.4), or None.
        self.remote = remote

    # -- helpers -----------------------------------------------------------------------------

    def _embed(self, text: str, table: str) -> _Vector | None:
        """`text`'s vector by the model of `table`'s vectors, or None when no vector can be had
        (never fails a write)."""
        provider = self.router.passage(table)
        if provider is None:
            return None
        try:
            vec = provider.embed([text], kind="passage")
        except EmbeddingUnavailable as exc:
            log.warning("embedding failed; the row is stored without a vector: %s", exc)
            return None
        row = np.asarray(vec, dtype=np.float32).reshape(-1)
        if row.size == 0 or not np.all(np.isfinite(row)):
            return None
        return _Vector(row.astype("<f4").tobytes(), provider.name, int(row.size))

    def _late_vector(self, table: str, row_id: int, text: str) -> bool:
        """After a commit that had to drop its vector: embed again with the model the table
        takes now; whether the row got a vector. A failure leaves the row for
        `check_health(fix=true)` or `cpersona reembed`."""
        vec = self._embed(text, table)
        if vec is None:
            return False
        return writes.fill_late_vector(self.db, table, row_id, text, vec)

    def _memory_vector(self, text: str) -> _Vector | None:
        """A memory's local vector: not kept in remote mode with CPERSONA_STORE_BLOB=false."""
        if self.remote is not None and not self.settings.store_blob:
            return None
        return self._embed(text, "memories")

    def _written(self) -> None:
        if self._after_write is not None:
            try:
                self._after_write()
            except Exception as exc:  # the row is committed; the index catches up on the next read
                if unreachable_in(exc) is None:  # an outage is logged once, where it is met
                    log.exception("post-write index update failed")

    # -- store -------------------------------------------------------------------------------

    def store(
        self, agent_id: str, message: dict[str, Any], channel: str, project_id: str
    ) -> dict[str, Any]:
        """The store pipeline, steps 3-14 of surface.md §5.1."""
        s = self.settings
        # Credentials go before anything else sees the text (issue 22): the caps cut, dedup
        # compares, the row, its indexes and its vector all hold the screened text.
        screen = Screen(s.secrets)
        msg_id = _str(message.get("id"))
        raw = screen.text(_str(message.get("content")))
        source = screen.json(normalize_source(message.get("source")))
        timestamp = message.get("timestamp")
        if not isinstance(timestamp, str) or not timestamp:
            timestamp = utc_now_iso()
        metadata = message.get("metadata")
        if not isinstance(metadata, dict):
            metadata = {}
        metadata = screen.json(metadata)
        source_text, metadata_text = py_json(source), py_json(metadata)
        if not raw:
            return _rejected("empty content")
        if screen.refusal is not None:
            return _rejected(screen.refusal)
        if len(source_text) > s.max_metadata_length:
            return _rejected(
                f"source too large ({len(source_text)} chars, max {s.max_metadata_length})"
            )
        if len(metadata_text) > s.max_metadata_length:
            return _rejected(
                f"metadata too large ({len(metadata_text)} chars, max {s.max_metadata_length})"
            )
        content, truncated = sanitize(raw, s.max_content_length)
        if not content:
            return _rejected("empty after sanitization")
        ahead = self._future_check(timestamp)
        if ahead is not None and s.future_timestamp_mode == "reject":
            return _rejected(
                f"timestamp '{timestamp}' is {ahead:.3f}s ahead of this clock "
                f"(allowance {s.future_timestamp_skew_seconds}s)"
            )
        new = NewMemory(
            agent_id=agent_id,
            project_id=project_id,
            msg_id=msg_id,
            content=content,
            source=source_text,
            timestamp=timestamp,
            metadata=metadata_text,
            channel=channel,
            embedding=None,
        )
        dup = writes.find_duplicate(self.db, new)
        if dup is not None:
            return _skipped(dup)
        vec = self._memory_vector(content)
        stored = writes.store_memory(self.db, new, vec)
        if stored.duplicate is not None:
            return _skipped(stored.duplicate)
        new_id = stored.id
        if new_id is None:
            return {"ok": True, "result": "skipped", "reason": "duplicate (unique index)"}
        embedded = stored.embedded
        if vec is not None and not embedded:
            embedded = self._late_vector("memories", new_id, content)
        self._written()
        if self.remote is not None:  # in remote mode `embedded` is the service's 2xx
            embedded = self.remote.index(agent_id, [Item(f"mem:{new_id}", content)])
        out: dict[str, Any] = {
            "ok": True,
            "result": "stored",
            "id": new_id,
            "embedded": embedded,
        }
        screen.mark(out)
        if truncated:
            out["truncated"] = True
        if ahead is not None and s.future_timestamp_mode == "warn":
            log.warning("store: timestamp %r is %.3fs ahead of this clock", timestamp, ahead)
            out["timestamp_ahead_of_clock"] = {
                "timestamp": timestamp,
                "ahead_by_seconds": round(ahead, 3),
                "allowance_seconds": s.future_timestamp_skew_seconds,
            }
        return out

    def _future_check(self, timestamp: str) -> float | None:
        """Seconds the stamp lies ahead beyond the allowance, or None (mode off / not ahead)."""
        if self.settings.future_timestamp_mode == "off":
            return None
        instant = parse_utc(timestamp)
        if instant is None:
            return None
        ahead = (instant - datetime.now(UTC)).total_seconds()
        return ahead if ahead > self.settings.future_timestamp_skew_seconds else None

    # -- update / delete / lock ---------------------------------------------------------------

    def update_memory(self, memory_id: int, content: str, agent_id: str) -> dict[str, Any]:
        if not content.strip():
            return _fail("Content cannot be empty")
        current = memory_sql.fetch(self.db, memory_id)
        refused = _ownership_error(memory_id, current, agent_id, "edited")
        if refused is not None:
            return refused
        screen = Screen(self.settings.secrets)
        content = screen.text(content)
        if screen.refusal is not None:
            return _fail(screen.refusal)
        text, truncated = sanitize(content, self.settings.max_content_length)
        if not text:
            return _fail("Content cannot be empty after sanitization")
        vec = self._memory_vector(text)
        try:
            changed, embedded = writes.update_memory(self.db, memory_id, text, vec)
        except ConstraintError:
            return _fail(
                f"Memory {memory_id} cannot take this content: another memory in the same "
                "agent, project and channel already has exactly this text"
            )
        if changed == 0:
            return _fail(f"Memory {memory_id} is locked and cannot be edited")
        if vec is not None and not embedded:
            self._late_vector("memories", memory_id, text)
        self._written()
        if self.remote is not None and current is not None:
            self.remote.index(current.agent_id, [Item(f"mem:{memory_id}", text)])
        out: dict[str, Any] = screen.mark({"ok": True, "updated_id": memory_id})
        if truncated:
            out["truncated"] = True
        return out

    def delete_memory(self, memory_id: int, agent_id: str) -> dict[str, Any]:
        if not agent_id:
            log.warning("delete_memory %s called without agent_id (unscoped)", memory_id)
        current = memory_sql.fetch(self.db, memory_id)
        refused = _ownership_error(memory_id, current, agent_id, "deleted")
        if refused is not None:
            return refused
        deleted = writes.delete_memory(self.db, memory_id, agent_id or None)
        if deleted == 0:
            return _fail(_ambiguous(memory_id))
        self._written()
        if self.remote is not None and current is not None:
            self.remote.remove(current.agent_id, [f"mem:{memory_id}"])
        return {"ok": True, "deleted_id": memory_id}

    def set_lock(self, memory_id: int, agent_id: str, locked: bool) -> dict[str, Any]:
        key = "locked_id" if locked else "unlocked_id"
        current = writes.lock_memory(self.db, memory_id, agent_id, locked)
        if current is None or (agent_id and current.agent_id != agent_id):
            msg = _ambiguous(memory_id) if agent_id else f"Memory {memory_id} not found"
            return _fail(msg)
        return {"ok": True, key: memory_id}

    # -- episodes ----------------------------------------------------------------------------

    def archive_episode(
        self,
        agent_id: str,
        summary: str,
        history: list[Any],
        keywords: str,
        resolved: bool,
        project_id: str,
        channel: str,
    ) -> dict[str, Any]:
        if summary == "":
            return {
                "ok": False,
                "episode_id": None,
                "error": "summary is required: server-side episode summarisation was removed; "
                "pre-compute summary (and keywords) before calling archive_episode",
            }
        cap = self.settings.max_content_length
        screen = Screen(self.settings.secrets)
        summary, keywords = screen.text(summary), screen.text(keywords)
        if screen.refusal is not None:
            return {"ok": False, "episode_id": None, "error": screen.refusal}
        text, cut_summary = sanitize(summary, cap)
        if not text:
            return {
                "ok": False,
                "episode_id": None,
                "error": "summary is required to archive an episode",
            }
        words, cut_keywords = sanitize(keywords, cap)
        start, end = _history_span(history)
        vec = self._embed(text, "episodes")
        new = NewEpisode(
            agent_id=agent_id,
            project_id=project_id,
            summary=text,
            keywords=words,
            start_time=start,
            end_time=end,
            resolved=resolved,
            channel=channel,
            embedding=None,
        )
        episode_id, embedded = writes.insert_episode(self.db, new, vec)
        if vec is not None and not embedded:
            self._late_vector("episodes", episode_id, text)
        self._written()
        if self.remote is not None:
            self.remote.index(agent_id, [Item(f"ep:{episode_id}", text)])
        out: dict[str, Any] = screen.mark({"ok": True, "episode_id": episode_id})
        if cut_summary or cut_keywords:
            out["truncated"] = True
        return out

    def delete_episode(self, episode_id: int, agent_id: str) -> dict[str, Any]:
        # Read in the deleting transaction: the service's namespace is the row's agent.
        deleted, owner = writes.delete_episode(
            self.db, episode_id, agent_id or None, read_owner=self.remote is not None
        )
        if deleted == 0:
            return _fail(f"Episode {episode_id} not found or not owned by agent")
        self._written()
        if self.remote is not None and owner is not None:
            self.remote.remove(owner.agent_id, [f"ep:{episode_id}"])
        return {"ok": True, "deleted_id": episode_id}

    # -- profiles ----------------------------------------------------------------------------

    def update_profile(self, agent_id: str, profile: str) -> dict[str, Any]:
        # 2.5.x answers these refusals with `reason` only; cpersona adds `error` (§19.4).
        if not profile:
            return {
                "ok": False,
                "profiles_updated": 0,
                "reason": "empty profile",
                "error": "empty profile",
            }
        screen = Screen(self.settings.secrets)
        profile = screen.text(profile)
        if screen.refusal is not None:
            return {
                "ok": False,
                "profiles_updated": 0,
                "reason": screen.refusal,
                "error": screen.refusal,
            }
        text, truncated = sanitize(profile, self.settings.max_profile_length)
        if not text:
            return {
                "ok": False,
                "profiles_updated": 0,
                "reason": "empty after sanitization",
                "error": "empty after sanitization",
            }
        writes.upsert_profile(self.db, agent_id, text)
        out: dict[str, Any] = screen.mark({"ok": True, "profiles_updated": 1})
        if truncated:
            out["truncated"] = True
        return out


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _rejected(reason: str) -> dict[str, Any]:
    return {"ok": False, "result": "rejected", "reason": reason}


def _skipped(dup: writes.Duplicate) -> dict[str, Any]:
    return {"ok": True, "result": "skipped", "reason": dup.reason, "id": dup.id}


def _fail(error: str) -> dict[str, Any]:
    return {"ok": False, "error": error}


def _ambiguous(memory_id: int) -> str:
    return f"Memory {memory_id} not found, not owned by agent, or locked"


def _ownership_error(
    memory_id: int, current: Memory | None, agent_id: str, verb: str
) -> dict[str, Any] | None:
    """The refusal for a missing / foreign / locked row, in the scoped or unscoped wording."""
    if agent_id:
        if current is None or current.agent_id != agent_id or current.locked:
            return _fail(_ambiguous(memory_id))
        return None
    if current is None:
        return _fail(f"Memory {memory_id} not found")
    if current.locked:
        return _fail(f"Memory {memory_id} is locked and cannot be {verb}")
    return None


def _history_span(history: list[Any]) -> tuple[str | None, str | None]:
    """Earliest and latest history stamps by instant, kept verbatim (surface.md §3.5)."""
    stamps = [
        item["timestamp"]
        for item in history
        if isinstance(item, dict) and isinstance(item.get("timestamp"), str) and item["timestamp"]
    ]
    if not stamps:
        return None, None
    parsed = [(parse_utc(s), s) for s in stamps]
    dated = [(t, s) for t, s in parsed if t is not None]
    if dated:
        return min(dated, key=lambda p: p[0])[1], max(dated, key=lambda p: p[0])[1]
    return min(stamps), max(stamps)
