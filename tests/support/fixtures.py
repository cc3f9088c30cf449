"""The upstream fixture databases (/work/shared/fixtures, beside the checkout) and private,
writable copies of them: cpersona migrates what it opens, so the shared files are never
opened by a test, only copied."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parents[3] / "shared" / "fixtures"
if not FIXTURES.exists():  # a checkout that is not beside shared/
    FIXTURES = Path("/work/shared/fixtures")
#: The CPersona 2.5.12 sample database.
SAMPLE = FIXTURES / "cpersona-2.5.12-sample.db"


def copy_database(source: Path, target: Path) -> Path:
    """`target`: a copy of the SQLite file `source` with its non-empty -wal and -shm, mode 0600
    (copyfile copies no mode bits: the shared copy is read-only); skips when `source` is absent."""
    if not source.exists():
        pytest.skip(f"fixture database not found: {source}")
    shutil.copyfile(source, target)
    for suffix in ("-wal", "-shm"):
        side = Path(f"{source}{suffix}")
        if side.exists() and side.stat().st_size:
            shutil.copyfile(side, Path(f"{target}{suffix}"))
    os.chmod(target, 0o600)
    return target
