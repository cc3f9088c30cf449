"""One module per tool group; `all_tools` lists them in registration order."""

from __future__ import annotations

from cpersona.config import Settings
from cpersona.server.registry import ToolSpec
from cpersona.server.tools import browse, memory


def all_tools(settings: Settings) -> list[ToolSpec]:
    return [*memory.tools(settings), *browse.tools(settings)]
