"""A health finding as a typed object, and the JSON a client reads of it (surface.md §9.2).

Each check declares the issues it reports as classes deriving from `Issue`, in its own
module, with `@finding(check, severity)`: a keyword-only dataclass whose `check`, `type` (the
check's name unless said otherwise) and `severity` default to what the decorator says, so a
check's name is written once per issue type. `to_json()` writes `type`, `severity` and
`check`, then the class's own fields in the order they are declared, leaving out those still
`UNSET` (a field a finding or its repair did not set is absent from the answer, not null),
then, for a `Fixable` finding, `repairable`, `fixed` and `fix_error`, then
`needs_human_review` and the review hint when the runner asked for a human. Fields with the
`INTERNAL` metadata (a repair's plan, the rows a repair left without a vector) never leave
the process.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, Final, TypeVar, dataclass_transform

#: The hint of a finding no repair can touch (the runner's review policy).
REVIEW_HINT = (
    "nothing here can be repaired automatically (locked rows, or no way to "
    "compute a fix); review it by hand"
)
_HEAD = ("type", "severity", "check")


class _Unset:
    """The value of a field a finding did not set (absent from its JSON)."""

    _instance: _Unset | None = None

    def __new__(cls) -> _Unset:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "UNSET"

    def __bool__(self) -> bool:
        return False


UNSET: Final[Any] = _Unset()


#: The metadata of a field the process keeps and the answer never shows.
INTERNAL: Final = {"wire": False}
_T = TypeVar("_T")


def internal(factory: Callable[[], _T]) -> _T:
    """A field the process keeps (a repair's plan) and the answer never shows."""
    kept: _T = field(default_factory=factory, repr=False, metadata=INTERNAL)
    return kept


@dataclass(kw_only=True, eq=False)
class Issue:
    """One finding. Subclasses (declared with `finding`) fix `type` and `check` where they are
    constant, add their fields (default `UNSET` for optional ones) and, for fix-capable
    checks, the fields their repair writes (`fixed`, `fix_error`, ...), in the order the
    answer lists them."""

    # UNSET only until a subclass or the finding names them (__post_init__ holds it to that).
    type: str = UNSET
    severity: str = UNSET
    check: str = UNSET
    #: Rows the repair left without a vector, {table: ids}: the second re-embed pass fills them.
    nulled: dict[str, list[int]] = field(default_factory=dict, repr=False, metadata=INTERNAL)
    #: Set by the runner's review policy (a finding no fix can touch).
    needs_human_review: bool = field(default=False, metadata=INTERNAL)
    #: The error of a failed repair, for a finding whose type has no `fixed` / `fix_error`
    #: (one its check's repair does not act on, rolled back with the rest).
    failure: str | None = field(default=None, metadata=INTERNAL)
    #: Fields written after the subclass's own, whatever their place among the dataclass's
    #: fields (a base class's fields come first there).
    _tail: ClassVar[tuple[str, ...]] = ()

    def __post_init__(self) -> None:
        unnamed = [name for name in _HEAD if getattr(self, name) is UNSET]
        if unnamed:
            raise TypeError(f"{type(self).__name__} needs {', '.join(unnamed)}")

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {name: getattr(self, name) for name in _HEAD}
        body = [f.name for f in fields(self) if f.metadata.get("wire") is not False]
        for name in [n for n in body if n not in _HEAD and n not in self._tail] + [*self._tail]:
            value = getattr(self, name)
            if value is not UNSET:
                out[name] = value
        if self.failure is not None:
            out["fixed"], out["fix_error"] = False, self.failure
        if self.needs_human_review:
            out["needs_human_review"] = True
            out.setdefault("hint", REVIEW_HINT)
        return out

    def failed(self, error: str) -> None:
        """The repair raised: it was rolled back, and the finding says so."""
        self.nulled = {}
        if {"fixed", "fix_error"} <= {f.name for f in fields(self)}:
            # Fields of the subclasses that declare them, set by name: this class has none of
            # its own (an assignment here would declare them, typed bool, on every finding).
            setattr(self, "fixed", False)  # noqa: B010
            setattr(self, "fix_error", error)  # noqa: B010
        else:
            self.failure = error


_I = TypeVar("_I", bound=Issue)


@dataclass_transform(kw_only_default=True, eq_default=False, field_specifiers=(field, internal))
def finding(
    check: str | None = None, severity: str | None = None, *, type_name: str | None = None
) -> Callable[[type[_I]], type[_I]]:
    """Declare an issue type: a keyword-only dataclass compared by identity (a finding is
    one object a run updates, not a value) whose `check`, `type` (`type_name`, else the
    check's name) and `severity` default to what is given here; a base class of one
    check's issue types gives only `check`, its subclasses their `type_name`."""
    given = {"type": type_name or check, "severity": severity, "check": check}

    def declare(cls: type[_I]) -> type[_I]:
        own = inspect.get_annotations(cls)
        for name, value in given.items():
            if value is not None:
                # An inherited field given a default here keeps its place in the answer.
                own[name] = "str"
                setattr(cls, name, value)
        cls.__annotations__ = own
        return dataclass(kw_only=True, eq=False)(cls)

    return declare


@finding()
class Fixable(Issue):
    """A finding its check's repair acts on: how many rows it may touch, then, after a fix
    run, whether it did (`fixed`) or why not (`fix_error`). These close its answer, after
    the fields the subclass declares; a subclass may give `repairable` a default."""

    repairable: int
    fixed: int | bool = UNSET
    fix_error: str = UNSET
    _tail: ClassVar[tuple[str, ...]] = ("repairable", "fixed", "fix_error")


@finding()
class Reembedded(Fixable):
    """A fixable finding whose repair leaves rows without a vector (`nulled`): after the
    runner's second pass, `re_embedded` closes its answer with how many it filled again."""

    re_embedded: int = UNSET
    _tail: ClassVar[tuple[str, ...]] = (*Fixable._tail, "re_embedded")


@finding(severity="info")
class Skipped(Issue):
    """A check that cannot apply here says why (info never degrades the verdict)."""

    reason: str


def skipped(check: str, reason: str) -> list[Issue]:
    return [Skipped(type=f"{check}_skipped", check=check, reason=reason)]


@finding(severity="info")
class NotApplicable(Issue):
    """A check whose subject this database does not hold (an SQLite file's integrity on
    PostgreSQL): said, never passed silently; info never degrades."""

    status: str = "not_applicable"
    reason: str


def not_applicable(check: str, reason: str) -> NotApplicable:
    return NotApplicable(type=f"{check}_not_applicable", check=check, reason=reason)


@finding(severity="warn", type_name="check_crashed")
class Crashed(Issue):
    """A detector that raised: the run goes on and says which check failed and how."""

    detail: str

    def to_json(self) -> dict[str, Any]:
        # The key order of CPersona 2.5.x's answer.
        return {
            "type": self.type,
            "check_name": self.check,
            "check": self.check,
            "detail": self.detail,
            "severity": self.severity,
        }
