"""The legacy pending-task queue: drain-only (surface.md §9.6).

Nothing in cpersona (or CPersona 2.5.12) enqueues. A database written by an older version may
still hold `pending_memory_tasks` rows; when `CPERSONA_TASK_QUEUE_ENABLED`, a worker started
with the server drains them once, oldest first:

* an `update_profile` task whose JSON payload carries the profile text (`profile`, `content`
  or `text`) is applied like the `update_profile` tool; a failure is retried after
  `CPERSONA_TASK_RETRY_DELAY` seconds until `CPERSONA_TASK_MAX_RETRIES` attempts, then the
  task is discarded;
* an `archive_episode` task cannot succeed (episodes need a caller-computed summary since
  2.4.10; 2.5.12 retries it until discarded): it is discarded at once;
* an unparseable payload or an unknown type is discarded;
* while the keyless pause bucket is active, tasks are discarded unprocessed.
"""

from __future__ import annotations

import json
import logging
import threading
from dataclasses import dataclass, field
from typing import Any

from cpersona.config import Settings
from cpersona.memory.writes import Writer
from cpersona.session import Pauses
from cpersona.storage import Store
from cpersona.storage import pending_tasks as task_sql

log = logging.getLogger("cpersona.tasks")


@dataclass(eq=False)
class TaskQueue:
    """Status and the one-shot drain of `pending_memory_tasks`."""

    db: Store
    settings: Settings
    writer: Writer
    pause: Pauses
    stopping: threading.Event = field(init=False, default_factory=threading.Event)
    _thread: threading.Thread | None = field(init=False, default=None)

    def status(self) -> dict[str, Any]:
        s = self.settings
        pending = task_sql.count(self.db) if s.task_queue_enabled else 0
        return {
            "enabled": s.task_queue_enabled,
            "pending": pending,
            "max_retries": s.task_max_retries,
            "retry_delay": s.task_retry_delay,
        }

    def start(self) -> threading.Thread | None:
        """Drain leftover rows in the background (only when the queue is enabled)."""
        if not self.settings.task_queue_enabled or self._thread is not None:
            return self._thread
        self._thread = threading.Thread(target=self._run, name="cpersona-tasks", daemon=True)
        self._thread.start()
        return self._thread

    def stop(self, grace: float = 5.0) -> None:
        self.stopping.set()
        if self._thread is not None:
            self._thread.join(timeout=grace)

    def _run(self) -> None:
        try:
            self.drain()
        except Exception:
            if not self.stopping.is_set():
                log.exception("the pending-task drain stopped")

    def drain(self) -> int:
        """Process every queued task; returns how many were taken off the queue."""
        done = 0
        while not self.stopping.is_set():
            task = task_sql.oldest(self.db)
            if task is None:
                break
            if self.pause.active("") is not None:
                log.info("task %d discarded unprocessed: the keyless pause is active", task.id)
            elif not self._attempt(task):
                if task.retries + 1 < self.settings.task_max_retries:
                    task_sql.bump_retries(self.db, task.id)
                    self.stopping.wait(self.settings.task_retry_delay)
                    continue
                log.warning(
                    "task %d (%s) failed %d times; discarded",
                    task.id,
                    task.task_type,
                    task.retries + 1,
                )
            task_sql.delete(self.db, task.id)
            done += 1
        return done

    def _attempt(self, task: task_sql.Task) -> bool:
        """True when the task is finished (applied or not worth retrying), False to retry."""
        try:
            payload = json.loads(task.payload)
        except ValueError:
            log.warning("task %d discarded: its payload is not JSON", task.id)
            return True
        if task.task_type == "update_profile" and isinstance(payload, dict):
            text = next(
                (
                    payload[k]
                    for k in ("profile", "content", "text")
                    if isinstance(payload.get(k), str)
                ),
                None,
            )
            if text is None:
                log.warning("task %d discarded: no profile text in its payload", task.id)
                return True
            return bool(self.writer.update_profile(task.agent_id, text).get("ok"))
        log.warning("task %d (%s) discarded: it cannot be applied", task.id, task.task_type)
        return True
