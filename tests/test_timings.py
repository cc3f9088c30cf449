"""Per-call stage timings (timings.py): a stage is recorded for the call that ran it, and only
for that call; outside any call it records nothing and still runs its block."""

from __future__ import annotations

import threading

import pytest
from cpersona.timings import CallTimings, stage, timed_call


def test_timings_stage_outside_a_call_runs_the_block_and_records_nothing():
    ran = []
    with stage("vector_scan"):
        ran.append(True)
    assert ran == [True]


def test_timings_stages_add_up_per_name_and_reach_the_observer():
    seen: list[tuple[str, float]] = []
    call = CallTimings("recall", lambda name, seconds: seen.append((name, seconds)))
    with timed_call(call):
        with stage("keyword"):
            pass
        with stage("vector_scan"):
            pass
        with stage("keyword"):
            pass
    assert call.counts == {"keyword": 2, "vector_scan": 1}
    assert [name for name, _ in seen] == ["keyword", "vector_scan", "keyword"]
    assert all(seconds >= 0 for _, seconds in seen)
    assert call.seconds["keyword"] == pytest.approx(seen[0][1] + seen[2][1])
    summary = call.summary()
    assert summary.startswith("keyword=") and "(x2)" in summary and "vector_scan=" in summary


def test_timings_a_stage_that_raises_is_still_recorded():
    call = CallTimings("recall")
    with timed_call(call), pytest.raises(KeyError), stage("gate"):
        raise KeyError("boom")
    assert call.counts == {"gate": 1}


def test_timings_a_call_sees_only_its_own_thread():
    mine = CallTimings("recall")
    other_thread: list[CallTimings] = []

    def elsewhere() -> None:
        theirs = CallTimings("store")
        other_thread.append(theirs)
        with timed_call(theirs), stage("hydration"):
            pass
        with stage("fusion"):  # after its call ended: recorded nowhere
            pass

    with timed_call(mine):
        worker = threading.Thread(target=elsewhere)
        worker.start()
        worker.join()
        with stage("scoring"):
            pass
    assert mine.counts == {"scoring": 1}
    assert other_thread[0].counts == {"hydration": 1}
