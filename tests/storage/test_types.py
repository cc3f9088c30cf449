"""The types hold (issue 18 item 4, issue 31 items 6 and 1-3): `mypy --strict` over the files
pyproject.toml [tool.mypy] names (storage/, derived/, health/, engine.py, retrieval/) and the
modules they use finds nothing; among others it checks that both backends' stores satisfy
`Store`, as `open_database` returns either. .ci/run runs the same command before pytest."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from child_env import inherited

ROOT = Path(__file__).resolve().parents[2]


def test_mypy_strict_passes_over_the_configured_files(tmp_path: Path) -> None:
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


def test_the_strict_files_include_the_layers_issue_31_names() -> None:
    """The layers whose types issue 31 put under mypy --strict stay there."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    files = set(config["tool"]["mypy"]["files"])
    names = ("storage", "derived", "health", "engine.py", "retrieval")
    wanted = {f"python/cpersona/{name}" for name in names}
    assert wanted <= files
    assert config["tool"]["mypy"]["strict"] is True
