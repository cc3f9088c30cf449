"""Every MCP tool, one declaration each (`ToolSpec`, server/registry.py), grouped by module.

A group module lists its declarations in `TOOLS`; this package gathers them and orders them
by their declared `position` (CPersona 2.5.x's registration order, surface.md §2), which is
the `tools/list` order. Adding a tool to a group touches that group's module only.
A group's `TOOLS` is left unannotated, so that a type checker infers each `ToolSpec[A]` and
holds its handler to its argument model.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from cpersona.server.registry import ToolSpec
from cpersona.server.tools import (
    admin,
    associations,
    browse,
    health,
    memory,
    portability,
    quality,
    recall,
    session,
)

_GROUPS = (memory, browse, recall, quality, portability, session, admin, health, associations)


def _ordered() -> tuple[ToolSpec[Any], ...]:
    specs = sorted((spec for group in _GROUPS for spec in group.TOOLS), key=lambda s: s.position)
    positions = [spec.position for spec in specs]
    if positions != list(range(1, len(specs) + 1)):
        raise RuntimeError(f"tool positions must be 1..{len(specs)}, once each: {positions}")
    names = [spec.name for spec in specs]
    if len(set(names)) != len(names):
        raise RuntimeError(f"two tools share a name: {names}")
    return tuple(specs)


#: Every tool, in tools/list order.
TOOLS = _ordered()
#: tools/list order of CPersona 2.5.12 (surface.md §2, the # column).
REGISTRATION_ORDER = tuple(spec.name for spec in TOOLS)


def all_tools() -> tuple[ToolSpec[Any], ...]:
    return TOOLS


@functools.cache
def by_name() -> Mapping[str, ToolSpec[Any]]:
    return {spec.name: spec for spec in TOOLS}
