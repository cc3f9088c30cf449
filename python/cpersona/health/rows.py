"""The shape most row checks share: the rows that break a check's rule become one finding,
which carries the plan its repair writes in one storage call.

A `Rows` finding counts rows its repair may all touch; a `LockedRows` finding counts rows of
which the repair touches the unlocked ones and says how many are `locked`. Their `found`
builds the finding from the rows a query returned, or none when it returned none. A check
whose repair is one storage write of the findings' plans declares it as `write_plan(write)`,
and what each finding then says of the repair is its type's `wrote`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Generic, Protocol, Self, TypeVar

from cpersona.health.context import HealthContext
from cpersona.health.issue import Fixable, finding, internal
from cpersona.storage.upkeep.handle import Handle

_T = TypeVar("_T")


@finding()
class Planned(Fixable, Generic[_T]):
    """A fixable finding that carries what its repair writes: row ids, or (id, new value)
    rows, of the rows the repair may touch."""

    plan: list[_T] = internal(list)

    def wrote(self, rows: int) -> None:
        """What the answer says once the plans were written: the rows the write changed (a
        subclass whose answer says more of the repair adds it here)."""
        self.fixed = rows


class Lockable(Protocol):
    """A flagged row: its id, and whether the user locked it against repairs."""

    @property
    def id(self) -> int: ...

    @property
    def locked(self) -> bool: ...


@finding()
class Rows(Planned[int]):
    """`count` rows break the rule, and the repair may touch every one."""

    count: int

    @classmethod
    def found(cls, ids: Sequence[int], **fields: Any) -> list[Self]:
        """The finding of the rows `ids` with the subclass's `fields`; none without rows."""
        if not ids:
            return []
        return [cls(count=len(ids), repairable=len(ids), plan=list(ids), **fields)]


@finding()
class LockedRows(Planned[int]):
    """`count` rows break the rule; the repair touches the unlocked ones and leaves the
    `locked` ones (listed after the subclass's own fields)."""

    count: int
    locked: int
    _tail = ("locked", *Fixable._tail)

    @classmethod
    def found(cls, rows: Sequence[Lockable], **fields: Any) -> list[Self]:
        """The finding of the flagged `rows` with the subclass's `fields`; none without rows."""
        if not rows:
            return []
        ids = [int(r.id) for r in rows if not r.locked]
        locked = len(rows) - len(ids)
        return [cls(count=len(rows), locked=locked, repairable=len(ids), plan=ids, **fields)]


_P = TypeVar("_P", bound=Planned[Any])


def write_plans(
    ctx: HealthContext, issues: Sequence[_P], write: Callable[[Handle, list[Any]], int]
) -> None:
    """Write every finding's plan in one call of `write` (a storage function, over the fix
    transaction); each finding then says what the write did (`Planned.wrote`)."""
    written = write(ctx.write_handle, [step for i in issues for step in i.plan])
    for i in issues:
        i.wrote(written)


def write_plan(
    write: Callable[[Handle, list[Any]], int],
) -> Callable[[HealthContext, list[_P]], None]:
    """The repair of a check whose findings' plans `write` writes, and nothing more."""

    def repair(ctx: HealthContext, issues: list[_P]) -> None:
        write_plans(ctx, issues, write)

    return repair
