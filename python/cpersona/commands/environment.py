"""The settings a command runs with, read from its environment (config.py), or the one line on
stderr that says why they cannot be: every command exits 2 on a configuration error, before it
touches a database (the checkup says so with its own exit code)."""

from __future__ import annotations

import sys

from cpersona.config import Settings
from cpersona.errors import ConfigError


def settings_from_env(command: str) -> Settings | None:
    """The settings, or None once `command: <why>` is printed (the caller exits)."""
    try:
        return Settings.from_env()
    except ConfigError as exc:
        print(f"{command}: {exc}", file=sys.stderr)
        return None
