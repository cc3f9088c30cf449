"""What a tool call needs in ACL mode (surface.md §11.4): the access declaration every tool
carries in its `ToolSpec`, and the permissions it demands of one call's raw arguments.

A tool declares its reaches once: read or read-write, on the agent one of its arguments names
(or on every agent), whether an empty agent argument sweeps every agent (§6.3), and what raises
a read to a write (`fix=true`, a move). server/acl.py asks the declaration of the tool called
and compares the demands with the caller's grants; nothing here knows a tool by name.

Demands are read from the *raw* arguments: an agent argument that is missing, empty or not a
string means `*` (every agent), so a caller can never widen its reach by leaving one out.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

STAR = "*"
NONE, READ, READ_WRITE = "none", "read", "read-write"

#: A test of a call's raw arguments.
Predicate = Callable[[Mapping[str, Any]], bool]


@dataclass(frozen=True, slots=True)
class Demand:
    """A permission a call needs on one agent (or `*`), and why it is `*` when it is."""

    agent: str
    required: str
    widened: str | None = None  # why the scope is every agent; None for a concrete agent


@dataclass(frozen=True, slots=True)
class Reach:
    """One permission a tool needs: `need` on the agent its argument `agent` names."""

    need: str
    #: The argument naming the agent; None: the tool acts on every agent.
    agent: str | None = "agent_id"
    #: An omitted or empty agent argument means every agent in this tool (§6.3).
    sweeping: bool = False
    #: The arguments that make this reach read-write (`fix=true`).
    writes_when: Predicate | None = None
    #: The arguments this reach applies to; None: every call.
    applies_when: Predicate | None = None
    #: Why a reach over every agent is one (shown in the denial); None: "<tool> acts on every
    #: agent".
    because: str | None = None
    #: The tool reads or writes a file path: without CPERSONA_EXPORT_DIR any path is reachable,
    #: so the reach is every agent's.
    files: bool = False

    def demand(self, tool: str, args: Mapping[str, Any], *, export_dir_set: bool) -> Demand | None:
        if self.applies_when is not None and not self.applies_when(args):
            return None
        need = READ_WRITE if self.writes_when is not None and self.writes_when(args) else self.need
        if self.agent is None:
            return Demand(STAR, need, self.because or f"{tool} acts on every agent")
        if self.files and not export_dir_set:
            return Demand(STAR, need, f"{tool} reaches any path without CPERSONA_EXPORT_DIR")
        return self._scope(tool, args, self.agent, need)

    def _scope(self, tool: str, args: Mapping[str, Any], key: str, need: str) -> Demand:
        value = args.get(key)
        if isinstance(value, str) and value and value != STAR:
            return Demand(value, need)
        if value == STAR:
            why = f"{key} '*' addresses every agent"
        elif self.sweeping and (value is None or value == ""):
            why = f"{key} is omitted or empty, which makes {tool} cover every agent; send {key}"
        else:
            why = (
                f"{key} is omitted, empty or not a string, so the call is not confined to one "
                f"agent; send {key}"
            )
        return Demand(STAR, need, why)


@dataclass(frozen=True, slots=True)
class Access:
    """A tool's access declaration: the reaches every call of it needs, in the order the
    guard checks them. No reaches: any authenticated principal may call it."""

    reaches: tuple[Reach, ...] = ()

    @classmethod
    def anyone(cls) -> Access:
        return cls()

    @classmethod
    def read(
        cls,
        agent: str = "agent_id",
        *,
        sweeping: bool = False,
        writes_when: Predicate | None = None,
    ) -> Access:
        return cls((Reach(READ, agent, sweeping=sweeping, writes_when=writes_when),))

    @classmethod
    def write(
        cls, agent: str = "agent_id", *, sweeping: bool = False, files: bool = False
    ) -> Access:
        return cls((Reach(READ_WRITE, agent, sweeping=sweeping, files=files),))

    @classmethod
    def every_agent(
        cls,
        need: str = READ,
        *,
        writes_when: Predicate | None = None,
        applies_when: Predicate | None = None,
        because: str | None = None,
    ) -> Access:
        reach = Reach(
            need, None, writes_when=writes_when, applies_when=applies_when, because=because
        )
        return cls((reach,))

    def __add__(self, other: Access) -> Access:
        return Access(self.reaches + other.reaches)

    def demands(self, tool: str, args: Mapping[str, Any], *, export_dir_set: bool) -> list[Demand]:
        """What a call of `tool` with `args` needs; `[]`: authentication alone suffices."""
        found = (r.demand(tool, args, export_dir_set=export_dir_set) for r in self.reaches)
        return [d for d in found if d is not None]

    @property
    def agent_arguments(self) -> Iterator[str]:
        """The arguments that name an agent in this tool."""
        return (r.agent for r in self.reaches if r.agent is not None)

    @property
    def reaches_files(self) -> bool:
        return any(r.files for r in self.reaches)


def flag(name: str) -> Predicate:
    """True when argument `name` is a JSON true (as coercion reads the flag)."""
    return lambda args: args.get(name) is True
