"""The storage interface's types hold (issue 18 item 4): `mypy --strict` over
python/cpersona/storage, python/cpersona/retrieval (issue 31) and the modules they use, as
pyproject.toml [tool.mypy] configures it,
finds nothing; among others it checks that both backends' stores satisfy `Store`, as
`open_database` returns either. .ci/run runs the same command before pytest."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from child_env import inherited

ROOT = Path(__file__).resolve().parents[2]


def test_mypy_strict_passes_over_storage(tmp_path: Path) -> None:
    pytest.importorskip("mypy", reason="mypy comes with the test extra (pip install -e '.[test]')")
    run = subprocess.run(
        [sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / "cache")],
        cwd=ROOT,
        env=inherited(),
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.startswith("Success: no issues found")
