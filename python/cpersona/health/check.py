"""A health check as one object: its detector, its repair, where it applies, its issue types.

A topic module of health/checks/ declares its checks as `Check` values next to their
detectors, repairs and issue classes; health/registry.py puts the topic modules in the order
the answer lists them (surface.md §9.2). A detector only reads and returns its issues,
carrying whatever its repair needs on them (internal fields); the repair runs right after it
in the same savepoint of the fix transaction (or as its `phase` says). `prepare` runs in a
fix run before the write lock is taken, for the work that must not happen under it
(embedding).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Generic, TypeVar

from cpersona.health.issue import Issue
from cpersona.storage.upkeep.handle import Subject

if TYPE_CHECKING:
    from cpersona.health.context import HealthContext

I = TypeVar("I", bound=Issue)  # noqa: E741 (the conventional name of an issue type)


class Phase(enum.Enum):
    """When a fix run runs a check (surface.md §9.1, "fix-run mechanics")."""

    #: A long read, before the write lock is taken (the check has no repair).
    BEFORE_LOCK = "before_lock"
    #: In the fix transaction, its repair in a savepoint right after its detection.
    IN_TRANSACTION = "in_transaction"
    #: After the commit, outside the write lock, against the repaired rows.
    AFTER_COMMIT = "after_commit"


@dataclass(frozen=True, slots=True)
class Applies:
    """Where a check's subject exists: the storage subjects it inspects. On a database that
    lacks one, the check is not run and answers `<name>_not_applicable` with `reason`."""

    needs: frozenset[Subject] = frozenset()
    reason: str = ""

    def __post_init__(self) -> None:
        if bool(self.needs) != bool(self.reason):
            raise ValueError("a check that needs a subject says why it is absent, and only then")


#: A check whose subject every database holds (its rows, the settings, the host's files).
EVERYWHERE = Applies()


@dataclass(frozen=True, eq=False)
class Check(Generic[I]):
    name: str
    #: The base severity of surface.md §9.2 (a finding may say otherwise).
    severity: str
    detect: Callable[[HealthContext], Sequence[I]]
    #: Every issue type `detect` returns (a test holds each check to it).
    issues: tuple[type[I], ...]
    applies: Applies
    repair: Callable[[HealthContext, list[I]], None] | None = None
    prepare: Callable[[HealthContext], None] | None = None
    phase: Phase = Phase.IN_TRANSACTION

    @property
    def fixable(self) -> bool:
        return self.repair is not None
