"""`python -m cpersona`: the same as the `cpersona` command."""

from __future__ import annotations

import sys

from cpersona.cli import main

if __name__ == "__main__":
    sys.exit(main())
