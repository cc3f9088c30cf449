"""Run `cpersona migrate` in this process and SIGKILL it right after batch N commits.

Usage: python killed_migration.py SOURCE TARGET BATCH N
"""

from __future__ import annotations

import os
import signal
import sys

from cpersona.commands.migrate import migrate, open_source, open_target


def main() -> None:
    source, target, batch, n = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    seen = 0

    def after_batch(table: str, done: int) -> None:
        nonlocal seen
        seen += 1
        if seen == n:
            os.kill(os.getpid(), signal.SIGKILL)

    src = open_source(source)
    dst = open_target(target)
    migrate(src, dst, source_location=source, batch=batch, after_batch=after_batch)
    raise SystemExit("the migration finished before batch N")


if __name__ == "__main__":
    main()
