"""The code is formatted and linted as STYLE.md asks (ruff for Python, rustfmt for Rust)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PY_PATHS = ["python", "tests", "benches"]


def _run(cmd: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_ruff_check_is_clean() -> None:
    out = _run([sys.executable, "-m", "ruff", "check", *PY_PATHS])
    assert out.returncode == 0, out.stdout + out.stderr


def test_ruff_format_is_clean() -> None:
    out = _run([sys.executable, "-m", "ruff", "format", "--check", *PY_PATHS])
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.skipif(shutil.which("cargo") is None, reason="no Rust toolchain on PATH")
def test_rustfmt_is_clean() -> None:
    out = _run(["cargo", "fmt", "--check"])
    assert out.returncode == 0, out.stdout + out.stderr
