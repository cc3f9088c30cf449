"""`python -m cpersona.checkup`: the health CLI (the command is cpersona.commands.checkup)."""

from __future__ import annotations

import sys

from cpersona.commands.checkup import main

if __name__ == "__main__":
    sys.exit(main())
