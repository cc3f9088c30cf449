"""`Forwarded`: an attribute an object answers with one of its members' attribute of the same
name (the engine's services, a mapped file's layout, the ACL guard's configuration).

One declaration per forwarded name instead of a hand-written read-only property each.
"""

from __future__ import annotations

from typing import Any, Generic, TypeVar, overload

T = TypeVar("T")


class Forwarded(Generic[T]):
    """`name: Forwarded[T] = Forwarded("member")` in a class body: `obj.name` reads
    `obj.member.name`. Read-only, as a property without a setter is."""

    __slots__ = ("_member", "_name")

    def __init__(self, member: str) -> None:
        self._member = member
        self._name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self._name = name

    @overload
    def __get__(self, obj: None, owner: type | None = None) -> Forwarded[T]: ...

    @overload
    def __get__(self, obj: object, owner: type | None = None) -> T: ...

    def __get__(self, obj: object | None, owner: type | None = None) -> Forwarded[T] | T:
        if obj is None:
            return self
        value: T = getattr(getattr(obj, self._member), self._name)
        return value

    def __set__(self, obj: object, value: Any) -> None:
        raise AttributeError(f"{self._name} is read through {self._member}: it cannot be set")
