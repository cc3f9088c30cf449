"""`python -m cpersona.checkup`: the health CLI (see cpersona.health.checkup)."""

from __future__ import annotations

import sys

from cpersona.health.checkup import main

if __name__ == "__main__":
    sys.exit(main())
