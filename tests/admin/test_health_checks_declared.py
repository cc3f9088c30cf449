"""Every registered health check is one declared object: its applicability, its issue types
(dataclasses the answer is written from), its repair; and what a run reports is of the types
the check declares, on either backend."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from cpersona.health import runner
from cpersona.health.check import EVERYWHERE, Applies, Check, Phase
from cpersona.health.context import from_engine
from cpersona.health.issue import REVIEW_HINT, UNSET, Issue, NotApplicable
from cpersona.health.registry import NAMES, REGISTRY
from cpersona.storage.upkeep.handle import Subject, subjects
from cpersona.storage.upkeep.texts import delete_unlocked_memories
from health_support import plant, rows


def _field_names(kind: type[Issue]) -> list[str]:
    return [f.name for f in dataclasses.fields(kind)]


@pytest.mark.parametrize("check", REGISTRY, ids=NAMES)
def test_every_check_declares_where_it_applies_and_its_issue_types(check: Check[Any]) -> None:
    assert isinstance(check.applies, Applies)
    assert check.applies.needs <= frozenset(Subject)
    if check.applies.needs:
        assert check.applies.reason, "a check that needs a subject says why it may be absent"
    assert check.issues, "a check declares the issue types it reports"
    for kind in check.issues:
        assert dataclasses.is_dataclass(kind) and issubclass(kind, Issue), kind
    if check.fixable:
        # The runner records a failing repair on every finding that asked for one.
        for kind in check.issues:
            if "repairable" in _field_names(kind):
                assert {"fixed", "fix_error"} <= set(_field_names(kind)), kind
    else:
        assert check.phase is not Phase.AFTER_COMMIT and check.prepare is None


def test_only_a_check_without_a_repair_runs_before_the_write_lock() -> None:
    for check in REGISTRY:
        if check.phase is Phase.BEFORE_LOCK:
            assert not check.fixable, check.name


def test_the_answer_of_an_issue_omits_what_was_not_set_and_asks_for_review() -> None:
    @dataclasses.dataclass(kw_only=True, eq=False)
    class Finding(Issue):
        count: int
        repairable: int
        fixed: int = UNSET
        note: str = UNSET

    found = Finding(type="t", severity="warn", check="c", count=2, repairable=0)
    found.nulled = {"memories": [1]}
    assert found.to_json() == {"type": "t", "severity": "warn", "check": "c", "count": 2,
                               "repairable": 0}  # fmt: skip
    found.needs_human_review = True
    assert list(found.to_json())[-2:] == ["needs_human_review", "hint"]
    assert found.to_json()["hint"] == REVIEW_HINT


@pytest.mark.anyio
async def test_what_a_run_reports_is_of_the_declared_types(connect: Any) -> None:
    async with connect() as tools:
        ids = []
        for text in ("trains", "buses", "ferries"):
            stored = await tools("store", {"agent_id": "a", "message": {"content": text}})
            ids.append(stored["id"])
        plant(
            tools.engine,  # damage no tool writes
            ("UPDATE memories SET content = '[Memory from x] trains' WHERE id = ?", (ids[0],)),
            ("UPDATE memories SET content = 'ping <@1> about buses' WHERE id = ?", (ids[1],)),
            ("UPDATE memories SET source = 'not json' WHERE id = ?", (ids[2],)),
        )
        engine = tools.engine
        present = subjects(engine.db)
        by_name = {c.name: c for c in REGISTRY}
        for fix in (False, True):
            ctx = from_engine(engine)
            found = runner.fix_run(ctx, REGISTRY) if fix else runner.report(ctx, REGISTRY)
            assert {i.check for i in found} >= {
                "memory_annotation",
                "discord_mention",
                "invalid_json",
            }
            for issue in found:
                check = by_name[issue.check]
                if check.applies.needs <= present:
                    assert isinstance(issue, check.issues), issue
                else:
                    assert isinstance(issue, NotApplicable), issue
        after = await tools("check_health")
    assert not [i for i in after["issues"] if i["check"] in ("invalid_json", "memory_annotation")]


def test_a_check_that_cannot_apply_is_declared_not_guessed() -> None:
    held_nowhere = [c.name for c in REGISTRY if c.applies.needs]
    assert set(held_nowhere) == {
        "fts_integrity",
        "dedup_msg_id_index",
        "schema_objects",
        "sqlite_integrity",
        "vector_index",
    }


@dataclasses.dataclass(kw_only=True, eq=False)
class _Broken(Issue):
    count: int
    repairable: int
    fixed: int | bool = UNSET
    fix_error: str = UNSET


@dataclasses.dataclass(kw_only=True, eq=False)
class _Note(Issue):
    detail: str


@pytest.mark.anyio
async def test_a_failing_repair_is_rolled_back_and_said_on_every_finding(connect: Any) -> None:
    def detect(ctx: Any) -> list[Issue]:
        return [
            _Broken(type="broken", severity="warn", check="broken", count=1, repairable=1),
            _Note(type="broken_note", severity="info", check="broken", detail="seen"),
        ]

    def repair(ctx: Any, issues: list[Issue]) -> None:
        delete_unlocked_memories(ctx.write_handle, [stored["id"]])
        raise RuntimeError("disk on fire")

    check = Check("broken", "warn", detect, (_Broken, _Note), EVERYWHERE, repair=repair)
    async with connect() as tools:
        stored = await tools("store", {"agent_id": "a", "message": {"content": "kept"}})
        found = runner.fix_run(from_engine(tools.engine), [check])
        kept = rows(tools.engine, "SELECT content FROM memories")
    assert [i.to_json() for i in found] == [
        {"type": "broken", "severity": "warn", "check": "broken", "count": 1, "repairable": 1,
         "fixed": False, "fix_error": "RuntimeError: disk on fire"},
        {"type": "broken_note", "severity": "info", "check": "broken", "detail": "seen",
         "fixed": False, "fix_error": "RuntimeError: disk on fire"},
    ]  # fmt: skip
    assert kept == [("kept",)]  # the savepoint undid the repair's write
