"""Background work that gives way to callers (issue 20): start-up calibration must never slow a
caller's recall by more than a tenth.

`CallActivity` counts the tool calls in flight and remembers when the last one ended; the
dispatch enters it around every handler. `GiveWay` is the background side: between two small
steps of its work (one pseudo-recall, one batch of query embeddings) a background thread calls
`pause()`, which waits while a call is in flight or one ended less than `quiet` seconds ago.
Under a load that never pauses, the wait is bounded by `share`: the thread then runs one step
after waiting nine times as long as its last step took, so it holds at most a tenth of the
time and still finishes. Calibration's thread also runs at the lowest scheduling priority
(Linux), so the kernel prefers the callers' threads when both are runnable.

A background rebuild of an index file (derived/healing.py) holds a larger share,
`REBUILD_SHARE`, and keeps its normal priority: until it ends every call takes the slower
database path, so its bound under load is what the callers wait on. At a tenth's share and
the lowest priority, a 100,000-row rebuild under back-to-back recalls took 903 s on a host
busy with other work (19 s there without the recalls).
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import KW_ONLY, dataclass, field

log = logging.getLogger("cpersona.yielding")

#: Seconds without a call before background work resumes at full speed: an agent's calls come
#: in bursts (recall, then store), so the next of a burst finds the core free.
QUIET_SECONDS = 0.25
#: The largest share of wall time a background step takes while callers keep the server busy.
BUSY_SHARE = 0.1
#: The smallest share of wall time a background rebuild of an index file holds while callers
#: keep the server busy (issue 33): each pause waits at most as long as the step before it
#: took, so under back-to-back calls the rebuild takes at most about twice its idle time. Until
#: it ends every call answers from the slower database path, so finishing it sooner serves
#: the callers too; a tenth (calibration's share) made a 10 s rebuild take 75 s under load.
REBUILD_SHARE = 0.5
#: The longest a waiting pause goes without looking at `urgent` and `stopping` again.
POLL_SECONDS = 0.05
#: The shortest wait for a pause in a busy server (a step that took no time still waits).
MIN_WAIT_SECONDS = 0.05


class CallActivity:
    """The tool calls in flight in this process, and when the last one ended."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._cond = threading.Condition()
        self._in_flight = 0
        self._last_end = float("-inf")

    @contextmanager
    def call(self) -> Iterator[None]:
        with self._cond:
            self._in_flight += 1
        try:
            yield
        finally:
            with self._cond:
                self._in_flight -= 1
                self._last_end = self._clock()
                self._cond.notify_all()

    def busy_for(self, quiet: float) -> float:
        """0 when no call is in flight and the last ended `quiet` seconds ago or more; else
        the seconds to wait before asking again."""
        with self._cond:
            if self._in_flight:
                return max(quiet, POLL_SECONDS)
            return max(0.0, self._last_end + quiet - self._clock())

    def wait(self, seconds: float) -> None:
        with self._cond:
            self._cond.wait(seconds)


@dataclass(eq=False)
class GiveWay:
    """The background side: `pause()` between steps; `urgent()` says a caller waits for this
    very work (a `calibrate_threshold` call queued behind it), which then runs unthrottled."""

    activity: CallActivity
    stopping: threading.Event
    _: KW_ONLY
    urgent: Callable[[], bool] = lambda: False
    quiet: float = QUIET_SECONDS
    share: float = BUSY_SHARE
    #: The clock the steps and waits are measured by (a test's fake one).
    clock: Callable[[], float] = time.monotonic
    _step_start: float = field(init=False)
    #: Seconds this work waited for callers, for the log line at its end.
    waited: float = field(init=False, default=0.0)

    def __post_init__(self) -> None:
        self._step_start = self.clock()

    def lower_priority(self) -> None:
        """The calling thread at nice 19 (Linux only: elsewhere `setpriority` with a thread id
        would address a process)."""
        if sys.platform != "linux":
            return
        try:
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
        except OSError as exc:  # a sandbox that forbids it: the waits below still hold
            log.debug("background thread priority unchanged: %s", exc)

    def pause(self) -> None:
        """Wait while callers are served (bounded by the busy share), then start a step."""
        step = self.clock() - self._step_start
        budget = max(MIN_WAIT_SECONDS, step * (1.0 - self.share) / self.share)
        begun = self.clock()
        while not self.stopping.is_set() and not self.urgent():
            wait = self.activity.busy_for(self.quiet)
            left = budget - (self.clock() - begun)
            if wait <= 0 or left <= 0:
                break
            # In slices: a caller queuing for this work, or a stop, ends the wait soon.
            self.activity.wait(min(wait, left, POLL_SECONDS))
        now = self.clock()
        self.waited += now - begun
        self._step_start = now
