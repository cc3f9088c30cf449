"""The no-persist pause, one per `session_key` bucket (surface.md §10).

A pause turns every write tool into a no-op for a TTL. It lives in this process (a restart
clears it) or, on a database servers on several hosts share, in the database, so every server
honours it (`Pauses`). Expiry is lazy (checked on each access, no timer).

Write tools ask `Pauses.skip(tool, session_key, **fields)`: it answers None when the caller's
bucket is not paused, else the tool's documented skip shape (`persisted: false`,
`dry_run: true`, `reason`). Tools that need only the reason use `Pauses.active()`.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from cpersona.storage import shared

if TYPE_CHECKING:
    from cpersona.storage.interface import Store

#: The shared bucket of every caller that declared no key (surface.md §10.1).
TRANSPORT = "transport"
DEFAULT_TTL = 1800
MAX_TTL = 86400
#: Live pauses per home (this process; the database when shared): a new key beyond this is
#: refused, never evicting another's pause.
MAX_LIVE = 256


@dataclass(frozen=True, slots=True)
class Bucket:
    """Which pause a call addresses: the trimmed key, or `transport` when undeclared."""

    name: str
    declared: bool

    @property
    def scope(self) -> str:
        return "session" if self.declared else "process"


def bucket(session_key: Any) -> Bucket:
    """Resolve a caller's `session_key` (non-strings and blanks are undeclared)."""
    key = session_key.strip() if isinstance(session_key, str) else ""
    if not key or key == TRANSPORT:
        return Bucket(TRANSPORT, False)
    return Bucket(key, True)


def _iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).isoformat(timespec="seconds")


def left_text(remaining: float) -> str:
    """`<m>m left` (whole minutes), `<s>s left` under a minute, or `TTL expired`."""
    if remaining <= 0:
        return "TTL expired"
    if remaining < 60:
        return f"{int(remaining)}s left"
    return f"{int(remaining // 60)}m left"


def skip_reason(tool: str, state: str) -> str:
    """The `reason` of a skipped write (surface.md §10.3)."""
    return (
        f"session no-persist mode active ({state}) — `{tool}` skipped. Call "
        "`resume_persistence` to re-enable, or wait for TTL to elapse."
    )


def skip_shape(tool: str, state: str, **fields: Any) -> dict[str, Any]:
    """`{ok: true, **fields, persisted: false, dry_run: true, reason}` for a paused write."""
    return {
        "ok": True,
        **fields,
        "persisted": False,
        "dry_run": True,
        "reason": skip_reason(tool, state),
    }


def marked(tool: str, state: str, result: dict[str, Any]) -> dict[str, Any]:
    """A service's skipped answer with the pause markers added (`ok` stays first)."""
    return skip_shape(tool, state, **{k: v for k, v in result.items() if k != "ok"})


class Pauses:
    """Every live pause this server honours, keyed by bucket name.

    Where a pause lives: in this process, or, when `db` is given (a store servers on several
    hosts share, `Capabilities.shared`), in the database (storage/shared.py), so every server
    behind a balancer honours it. Declared keys go to the database; the keyless `transport`
    bucket too when `share_transport` (streamable HTTP, where it spans the keyless clients of
    the deployment as it spanned those of one process), and stays in the process under stdio,
    where it is one client's (surface.md §10.2). docs/scale-out.md says why.

    `clock` returns Unix seconds and, when set, replaces both homes' clocks (tests move time
    with it). Unset, a pause in the process uses this host's clock and one in the database the
    database's: every server then measures one deadline against one clock, whatever their skew.
    """

    def __init__(
        self,
        clock: Callable[[], float] | None = None,
        *,
        db: Store | None = None,
        share_transport: bool = False,
    ) -> None:
        self.clock = clock
        self._db = db
        self._share_transport = share_transport
        self._deadlines: dict[str, float] = {}
        self._lock = threading.Lock()

    def _in_db(self, b: Bucket) -> Store | None:
        return self._db if b.declared or self._share_transport else None

    def _fixed(self) -> float | None:
        return None if self.clock is None else self.clock()

    def _local_now(self) -> float:
        return time.time() if self.clock is None else self.clock()

    def _live(self, now: float) -> dict[str, float]:
        # Lazy expiry: forget what has elapsed whenever the table is looked at.
        for name in [n for n, d in self._deadlines.items() if d <= now]:
            del self._deadlines[name]
        return self._deadlines

    def _deadline(self, b: Bucket) -> tuple[float, float | None]:
        """(now, the bucket's live deadline or None), each by the clock of the pause's home."""
        db = self._in_db(b)
        if db is None:
            with self._lock:
                now = self._local_now()
                return now, self._live(now).get(b.name)
        now, deadline = shared.pause_deadline(db, b.name)
        if self.clock is not None:
            now = self.clock()
        return now, (deadline if deadline is not None and deadline > now else None)

    # -- the three tools ---------------------------------------------------------------------

    def pause(self, session_key: Any, ttl_seconds: int) -> dict[str, Any]:
        if ttl_seconds < 1:
            return {"ok": False, "error": "ttl_seconds must be >= 1"}
        ttl = min(int(ttl_seconds), MAX_TTL)
        b = bucket(session_key)
        db = self._in_db(b)
        earliest: float | None = None
        if db is not None:
            done = shared.put_pause(db, b.name, ttl, MAX_LIVE, self._fixed())
            now, earliest = done.now, done.earliest
        else:
            with self._lock:
                now = self._local_now()
                live = self._live(now)
                if b.name not in live and len(live) >= MAX_LIVE:
                    earliest = min(live.values())
                else:
                    live[b.name] = now + ttl  # re-pausing replaces the deadline (no stacking)
        if earliest is not None:
            return {
                "ok": False,
                "error": f"persistence was NOT paused: {MAX_LIVE} sessions already hold a "
                "live pause and none is evicted for another. The earliest frees at "
                f"{_iso(earliest)}; retry then, or resume a pause you hold.",
            }
        return {"paused": True, "expires_at": _iso(now + ttl), "ttl_seconds": ttl, "scope": b.scope}

    def resume(self, session_key: Any) -> dict[str, Any]:
        b = bucket(session_key)
        db = self._in_db(b)
        if db is not None:
            was = shared.drop_pause(db, b.name, self._fixed())
        else:
            with self._lock:
                was = self._live(self._local_now()).pop(b.name, None) is not None
        return {"paused": False, "was_active": was, "scope": b.scope}

    def status(self, session_key: Any) -> dict[str, Any]:
        b = bucket(session_key)
        now, deadline = self._deadline(b)
        if deadline is None:
            return {
                "paused": False,
                "expires_at": None,
                "ttl_remaining_seconds": None,
                "scope": b.scope,
            }
        return {
            "paused": True,
            "expires_at": _iso(deadline),
            "ttl_remaining_seconds": max(0, math.floor(deadline - now)),
            "scope": b.scope,
        }

    def live_count(self) -> int:
        """How many buckets are paused right now (the metrics' gauge): in this process, plus
        in the database when pauses are shared (every server's)."""
        with self._lock:
            local = len(self._live(self._local_now()))
        if self._db is None:
            return local
        return local + shared.live_pauses(self._db, self._fixed())

    # -- what write tools call ---------------------------------------------------------------

    def active(self, session_key: Any) -> str | None:
        """The pause state text (`12m left`) when the caller's bucket is paused, else None."""
        now, deadline = self._deadline(bucket(session_key))
        return None if deadline is None else left_text(deadline - now)

    def skip(self, tool: str, session_key: Any, **fields: Any) -> dict[str, Any] | None:
        """The tool's skip shape while the caller's bucket is paused, else None (go ahead)."""
        state = self.active(session_key)
        return None if state is None else skip_shape(tool, state, **fields)
