"""The server's log handler: one format on stderr, and no flood when a failure repeats.

A failure that repeats (a client hanging up mid-body, a flood of stalled connections, accept()
out of descriptors: asyncio logs that with a traceback up to 2,048 times per event-loop tick)
must not bury the log or cost the server its time. `RateLimit` lets the first `burst` records
of each kind through per `window` seconds and counts the rest; the next record of that kind
after the window says how many were left out. A kind is the logger, the level and the message
with its numbers masked: two different failures (an OAuth token refused for an expired
signature, another for a wrong audience) never hide each other, while a count, a port or an
id in the text does not make a repeat new.
"""

from __future__ import annotations

import logging
import re
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

_DIGITS = re.compile(r"\d+")

#: Kinds remembered at most; past that the oldest window is forgotten (a message naming an
#: agent or a path is a kind of its own).
_MAX_KINDS = 1024


@dataclass(slots=True)
class _Window:
    start: float
    passed: int
    suppressed: int


class RateLimit(logging.Filter):
    """At most `burst` records of a kind per `window` seconds; DEBUG records always pass."""

    def __init__(
        self,
        *,
        burst: int = 5,
        window: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__()
        self.burst = burst
        self.window = window
        self._clock = clock
        self._lock = threading.Lock()
        self._kinds: dict[tuple[str, int, str], _Window] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno <= logging.DEBUG:
            return True
        kind = (record.name, record.levelno, _DIGITS.sub("#", record.getMessage()))
        now = self._clock()
        with self._lock:
            seen = self._kinds.get(kind)
            if seen is None or now - seen.start >= self.window:
                left_out = seen.suppressed if seen is not None else 0
                if seen is None and len(self._kinds) >= _MAX_KINDS:
                    self._kinds.pop(next(iter(self._kinds)))
                self._kinds[kind] = _Window(start=now, passed=1, suppressed=0)
            elif seen.passed < self.burst:
                seen.passed += 1
                left_out = 0
            else:
                seen.suppressed += 1
                return False
        if left_out:
            record.msg = (
                f"{record.getMessage()} ({left_out} more like this in the previous "
                f"{self.window:g} s not logged)"
            )
            record.args = None
        return True


class OneLine(logging.Filter):
    """A failure whose traceback says nothing new, as one line (the exception's text kept)."""

    def __init__(self, *prefixes: str) -> None:
        super().__init__()
        self.prefixes = prefixes

    def filter(self, record: logging.LogRecord) -> bool:
        if str(record.msg).startswith(self.prefixes):
            text = record.getMessage().replace("\n", "; ")
            if record.exc_info and record.exc_info[1] is not None:
                text += f": {record.exc_info[1]}"
            record.msg, record.args = text, None
            record.exc_info = record.exc_text = None
        return True


def configure(level: str) -> None:
    """Every record to stderr (stdout belongs to the protocol), rate-limited per kind."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s [%(name)s] %(levelname)s: %(message)s"))
    handler.addFilter(RateLimit())
    # asyncio logs each failed accept() (out of descriptors) with a traceback, and keeps
    # accepting in the same tick; the connection guard (server/connections.py) keeps the
    # process from getting there, this keeps it to one line if something else uses them up.
    handler.addFilter(OneLine("socket.accept() out of system resource"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
