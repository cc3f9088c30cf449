"""Background work gives way to callers (yielding.py): a pause waits while a call is in flight
or has just ended, never past its busy-share budget, and not at all when a caller waits for
the work itself or the work is stopping. Read by order of events, not by a clock: each test
holds a call open and looks at whether the pause has returned yet."""

from __future__ import annotations

import contextlib
import threading
import time

from cpersona.yielding import CallActivity, GiveWay

WAIT = 30.0  # generous bound for a thread to finish; never a timing claim


def paused(give_way: GiveWay) -> threading.Thread:
    thread = threading.Thread(target=give_way.pause, daemon=True)
    thread.start()
    return thread


def test_a_pause_waits_for_the_call_in_flight_and_the_quiet_after_it() -> None:
    activity = CallActivity()
    give_way = GiveWay(activity, threading.Event(), quiet=0.2, share=1e-9)
    with activity.call():
        thread = paused(give_way)
        thread.join(timeout=0.5)
        assert thread.is_alive()  # the call is still in flight
    ended = time.monotonic()
    thread.join(timeout=WAIT)
    assert not thread.is_alive()
    assert time.monotonic() - ended >= 0.2  # not before the quiet period had passed
    assert give_way.waited >= 0.2


def test_an_idle_server_is_not_waited_for() -> None:
    activity = CallActivity()
    give_way = GiveWay(activity, threading.Event(), quiet=5.0, share=1e-9)
    thread = paused(give_way)  # no call was ever made
    thread.join(timeout=WAIT)
    assert not thread.is_alive()
    assert give_way.waited < 5.0


def test_a_busy_server_still_lets_a_step_run_within_the_share() -> None:
    activity = CallActivity()
    give_way = GiveWay(activity, threading.Event(), quiet=0.1, share=0.5)
    with activity.call():  # busy throughout: the budget (a step's length) ends the pause
        for _ in range(3):
            thread = paused(give_way)
            thread.join(timeout=WAIT)
            assert not thread.is_alive()


def test_urgent_work_and_stopping_work_do_not_wait() -> None:
    activity = CallActivity()
    stopping = threading.Event()
    urgent = threading.Event()
    with activity.call():
        give_way = GiveWay(activity, stopping, urgent=urgent.is_set, quiet=60, share=1e-9)
        waiting = paused(give_way)
        waiting.join(timeout=0.3)
        assert waiting.is_alive()
        urgent.set()
        waiting.join(timeout=WAIT)
        assert not waiting.is_alive()
        urgent.clear()
        waiting = paused(give_way)
        stopping.set()
        waiting.join(timeout=WAIT)
        assert not waiting.is_alive()


def test_calls_are_counted_until_they_end_even_when_they_raise() -> None:
    activity = CallActivity()
    with contextlib.suppress(ValueError), activity.call():
        assert activity.busy_for(0.0) > 0  # in flight: busy whatever the quiet period
        raise ValueError("a handler failed")
    assert activity.busy_for(0.0) == 0.0
    assert activity.busy_for(60.0) > 0  # it has only just ended


class _Clock:
    """A clock that only moves when told: a step's length and a pause's wait, exactly."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class _AlwaysBusy(CallActivity):
    """Calls back to back that never pause; waiting moves the fake clock instead of sleeping."""

    def __init__(self, clock: _Clock) -> None:
        super().__init__(clock)
        self._fake = clock

    def busy_for(self, quiet: float) -> float:
        return max(quiet, 0.05)

    def wait(self, seconds: float) -> None:
        self._fake.now += seconds


def test_a_rebuild_under_calls_that_never_pause_holds_at_least_its_share() -> None:
    from cpersona.yielding import REBUILD_SHARE

    clock = _Clock()
    give_way = GiveWay(_AlwaysBusy(clock), threading.Event(), share=REBUILD_SHARE, clock=clock)
    worked = 0.0
    for step in (0.3, 0.08, 0.5, 0.2, 0.12):  # steps of a rebuild, as long as they happen to be
        clock.now += step
        worked += step
        give_way.pause()
    # Each pause waited at most as long as the step before it took: under this load the
    # rebuild takes at most 1 / REBUILD_SHARE (2x) its idle time.
    assert worked / clock.now >= REBUILD_SHARE - 1e-9
    assert give_way.waited > 0  # it did give way
