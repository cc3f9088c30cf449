"""The environment a process a test starts inherits from the test run (one definition).

A test gives its server or command a small whitelisted environment, so that the developer's
CPERSONA_* settings never reach it. `XDG_CACHE_HOME` is in it: the run's own cache directory
(tests/conftest.py), where servers keep the PostgreSQL full-text index files and the recorded
MCP handshake (server/handshake.py), never the developer's ~/.cache.
"""

from __future__ import annotations

import os

KEPT = ("PATH", "HOME", "PYTHONPATH", "XDG_CACHE_HOME")


def inherited(*more: str) -> dict[str, str]:
    """The kept variables (and `more`) that are set in this process."""
    return {k: os.environ[k] for k in (*KEPT, *more) if k in os.environ}
