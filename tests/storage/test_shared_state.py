"""The shared-state tables on their own, on both backends (storage/shared.py).

Pauses kept in the database answer exactly what the in-process pauses answer for any sequence
of pause / resume / status / time passing (the process's table is the oracle). The alias
ledger's insert-or-read gives every racing caller the one alias that won, issued by exactly
one of them, and never gives a subject an alias another holds; a ledger file that disagrees
with the database imports nothing.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from cpersona.session import Pauses
from cpersona.storage import open_database, shared
from cpersona.storage.interface import Store
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st


@pytest.fixture
def store(tmp_path: Path, database_url_for: Callable[[str], str | None]) -> Iterator[Store]:
    path = str(tmp_path / "shared.db")
    db = open_database(path, database_url=database_url_for(path))
    yield db
    db.close()


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


keys = st.sampled_from(["", "transport", "alpha", " alpha ", "beta", "ключ"])
ops = st.lists(
    st.one_of(
        st.tuples(st.just("pause"), keys, st.integers(min_value=0, max_value=90_000)),
        st.tuples(st.just("resume"), keys, st.just(0)),
        st.tuples(st.just("status"), keys, st.just(0)),
        st.tuples(st.just("active"), keys, st.just(0)),
        st.tuples(st.just("wait"), st.just(""), st.integers(min_value=1, max_value=4000)),
    ),
    min_size=1,
    max_size=14,
)


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(steps=ops)
def test_pauses_in_the_database_answer_as_pauses_in_the_process(store: Store, steps) -> None:
    with store.atomic() as conn:
        conn.execute("DELETE FROM cpersona_pauses")
    clock = Clock()
    oracle = Pauses(clock)
    in_db = Pauses(clock, db=store, share_transport=True)
    for op, key, n in steps:
        if op == "wait":
            clock.now += n
            continue
        if op == "pause":
            expected, got = oracle.pause(key, n), in_db.pause(key, n)
        else:
            expected, got = getattr(oracle, op)(key), getattr(in_db, op)(key)
        assert got == expected, (op, key, n)
    assert in_db.live_count() == oracle.live_count()


def test_pauses_in_the_database_are_capped_without_eviction(store: Store) -> None:
    clock = Clock()
    pauses = Pauses(clock, db=store)
    for i in range(256):
        assert pauses.pause(f"k{i}", 60 + i)["paused"]
    refused = pauses.pause("one-too-many", 60)
    assert refused["ok"] is False
    assert "The earliest frees at 2023-11-14T22:14:20+00:00" in refused["error"]
    clock.now += 61  # k0's pause elapsed: its place is free
    assert pauses.pause("one-too-many", 60)["paused"]
    assert pauses.status("k255")["paused"]


def test_the_session_key_never_reaches_the_database(store: Store) -> None:
    Pauses(db=store).pause("my secret key", 60)
    (row,) = store.query("SELECT bucket FROM cpersona_pauses")
    assert row[0] == shared.bucket_digest("my secret key") and "secret" not in row[0]


def race(store: Store, subject: str, racers: int) -> list[tuple[str | None, bool]]:
    """`racers` threads released at once, each offering its own alias for `subject`."""
    start = threading.Barrier(racers)
    answers: list[tuple[str | None, bool]] = []

    def offer(i: int) -> None:
        start.wait()
        answers.append(shared.issue_alias(store, "https://iss", subject, f"u-{subject}{i}"))

    threads = [threading.Thread(target=offer, args=(i,)) for i in range(racers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return answers


def test_racing_callers_get_one_alias_issued_once(store: Store) -> None:
    for subject in ("alice", "bob", "carol"):
        answers = race(store, subject, 6)
        assert len(answers) == 6
        assert len({alias for alias, _ in answers}) == 1, answers
        assert [issued for _, issued in answers].count(True) == 1, answers
        assert shared.subject_alias(store, "https://iss", subject) == answers[0][0]


def test_an_alias_another_subject_holds_is_never_given(store: Store) -> None:
    assert shared.issue_alias(store, "i", "a", "u-000000000001") == ("u-000000000001", True)
    assert shared.issue_alias(store, "i", "b", "u-000000000001") == (None, False)
    assert shared.subject_alias(store, "i", "b") is None
    assert shared.alias_issued(store, "u-000000000001")
    assert not shared.alias_issued(store, "u-000000000002")


def test_a_disagreeing_ledger_file_imports_nothing(store: Store) -> None:
    shared.issue_alias(store, "i", "a", "u-000000000001")
    rows = [("i", "new", "u-000000000003"), ("i", "a", "u-000000000002")]
    assert shared.import_aliases(store, rows) == ["'i' / 'a' -> 'u-000000000002'"]
    assert shared.subject_alias(store, "i", "new") is None
    assert shared.import_aliases(store, [("i", "a", "u-000000000001"), rows[0]]) == []
    assert shared.subject_alias(store, "i", "new") == "u-000000000003"
