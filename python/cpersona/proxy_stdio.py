"""`python -m cpersona.proxy_stdio`: the stdio-to-HTTP bridge (surface.md §11.6; the command
itself is cpersona.commands.proxy)."""

from __future__ import annotations

import sys

from cpersona.commands.proxy import main

if __name__ == "__main__":
    sys.exit(main())
