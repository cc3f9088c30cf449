"""The command-line tools as a test runs them: a child process with the test's environment and
a database path, its output kept as text, bounded in time."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

#: Seconds a command may take before the test fails (never a timing claim).
WAIT = 120


def index_command(
    db: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`python -m cpersona index <args>` on `db`; `env`: the whole environment instead of the
    test process's plus the database path."""
    return subprocess.run(
        [sys.executable, "-m", "cpersona", "index", *args],
        env=env or {**os.environ, "CPERSONA_DB_PATH": str(db)},
        capture_output=True,
        text=True,
        timeout=WAIT,
    )
