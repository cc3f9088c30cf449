"""How a check declares its issue types (health/issue.py `finding`, health/rows.py): the check's
name written once, the answer's key order, the rows a repair may touch, and a type that names
no check refused when it is built."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from cpersona.health.issue import Issue, finding
from cpersona.health.rows import LockedRows, Rows


@dataclass(frozen=True)
class _Flag:
    id: int
    locked: bool


@finding("stale_rows", "warn")
class _StaleRows(LockedRows):
    older_than: int


@finding("queue")
class _QueueIssue(Issue):
    depth: int


@finding(severity="info", type_name="queue_backlog")
class _Backlog(_QueueIssue):
    oldest: str


def test_rows_a_check_flags_become_one_finding_of_the_unlocked_ones() -> None:
    flagged = [_Flag(1, False), _Flag(2, True), _Flag(3, False)]
    [found] = _StaleRows.found(flagged, older_than=7)
    assert list(found.to_json().items()) == [
        ("type", "stale_rows"),
        ("severity", "warn"),
        ("check", "stale_rows"),
        ("count", 3),
        ("older_than", 7),
        ("locked", 1),  # after the subclass's own fields, before what the repair may do
        ("repairable", 2),
    ]
    assert found.plan == [1, 3]
    assert _StaleRows.found([], older_than=7) == []
    assert Rows.found([], check="c", type="c", severity="info") == []


def test_a_check_with_several_issue_types_names_itself_once() -> None:
    backlog = _Backlog(depth=4, oldest="2026-01-01")
    assert backlog.to_json() == {
        "type": "queue_backlog",
        "severity": "info",
        "check": "queue",
        "depth": 4,
        "oldest": "2026-01-01",
    }


def test_an_issue_type_that_names_no_check_is_refused_when_built() -> None:
    @finding(severity="info")
    class Unnamed(Issue):
        detail: str

    with pytest.raises(TypeError, match="Unnamed needs type, check"):
        Unnamed(detail="x")
    named = Unnamed(type="t", check="c", detail="x")
    assert named.to_json() == {"type": "t", "severity": "info", "check": "c", "detail": "x"}
