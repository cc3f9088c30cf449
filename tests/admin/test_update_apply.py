"""`check_update` with `apply=true` where it really installs (surface.md §13.4): a pip-installed
copy, a newer release on the index, checks enabled. The "index" is a wheel directory made by the
test (`PIP_NO_INDEX`, `PIP_FIND_LINKS`) and the environment a fresh virtualenv, so nothing touches
the network or the interpreter running the tests. The tool installs exactly the version it
reported; a release the index cannot deliver is reported as not applied with pip's own words."""

from __future__ import annotations

import base64
import hashlib
import subprocess
import sys
import venv
import zipfile
from pathlib import Path
from typing import Any

import pytest
from cpersona import __version__
from cpersona.update import install_hint

NEWER = "99.0.0"


# Installing a release is no business of the database: SQLite only (a second run in one
# session finds the release already installed by the first).
pytestmark = pytest.mark.runs_on(store_backend="sqlite")


def fake_wheel(folder: Path, version: str) -> Path:
    """A minimal, valid pure-Python wheel of a package named cpersona."""
    dist = f"cpersona-{version}.dist-info"
    files = {
        "cpersona/__init__.py": f'__version__ = "{version}"\n',
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: cpersona\nVersion: {version}\n",
        f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\n"
        "Tag: py3-none-any\n",
    }
    record = []
    for name, text in files.items():
        digest = hashlib.sha256(text.encode()).digest()
        b64 = base64.urlsafe_b64encode(digest).rstrip(b"=").decode()
        record.append(f"{name},sha256={b64},{len(text.encode())}")
    record.append(f"{dist}/RECORD,,")
    files[f"{dist}/RECORD"] = "\n".join(record) + "\n"
    path = folder / f"cpersona-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as whl:
        for name, text in files.items():
            whl.writestr(name, text)
    return path


def installed_version(python: Path) -> str | None:
    probe = subprocess.run(
        [str(python), "-c", "import importlib.metadata as m; print(m.version('cpersona'))"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return probe.stdout.strip() if probe.returncode == 0 else None


@pytest.fixture(scope="module")
def environment(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtualenv with pip and no cpersona: the user's pip-installed environment."""
    root = tmp_path_factory.mktemp("venv")
    venv.EnvBuilder(with_pip=True).create(root)
    return root / "bin" / "python"


@pytest.fixture
def index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The wheel directory pip installs from in place of PyPI (empty until a test fills it)."""
    wheels = tmp_path / "index"
    wheels.mkdir()
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(wheels))
    monkeypatch.setenv("PIP_DISABLE_PIP_VERSION_CHECK", "1")
    return wheels


async def apply(connect: Any, environment: Path, released: list[str]) -> dict[str, Any]:
    """check_update(refresh, apply) where PyPI lists this version and `released`, and the
    installer is pip of `environment` (a module path with no checkout around it)."""
    outside = environment.parent.parent / "site-packages" / "cpersona" / "update.py"
    async with connect(update_check=True) as tools:
        updates = tools.engine.updates
        updates.fetch = lambda: dict.fromkeys([__version__, *released], False)
        updates.installer = lambda: install_hint(executable=str(environment), module=outside)
        out: dict[str, Any] = await tools("check_update", {"refresh": True, "apply": True})
    return out


@pytest.mark.slow
@pytest.mark.anyio
async def test_apply_installs_the_reported_release_from_the_index(
    connect: Any, environment: Path, index: Path
) -> None:
    fake_wheel(index, NEWER)
    fake_wheel(index, "100.0.0rc1")  # a pre-release on the index is not what gets installed

    out = await apply(connect, environment, [NEWER, "100.0.0rc1"])

    assert (out["state"], out["available"]) == ("newer", NEWER)
    command = [str(environment), "-m", "pip", "install", "--upgrade", f"cpersona=={NEWER}"]
    assert out["install"]["method"] == "pip"
    assert out["install"]["command"] == command
    result = out["apply_result"]
    assert (result["applied"], result["exit_code"]) == (True, 0), result["output_tail"]
    assert result["restart_required"] is True
    assert any(f"cpersona-{NEWER}" in line for line in result["output_tail"])
    assert installed_version(environment) == NEWER


@pytest.mark.slow
@pytest.mark.anyio
async def test_apply_reports_pips_failure_when_the_index_lacks_the_release(
    connect: Any, environment: Path, index: Path
) -> None:
    before = installed_version(environment)

    out = await apply(connect, environment, ["98.0.0"])

    result = out["apply_result"]
    assert result["applied"] is False
    assert result["exit_code"] != 0
    assert any("cpersona==98.0.0" in line for line in result["output_tail"])
    assert len(result["output_tail"]) <= 40
    assert installed_version(environment) == before


def test_install_hint_names_the_environment_it_was_given(tmp_path: Path) -> None:
    python = tmp_path / "env" / "bin" / "python"
    hint = install_hint(executable=str(python), module=tmp_path / "lib" / "cpersona" / "u.py")
    assert hint["method"] == "pip"
    assert hint["command"] == [str(python), "-m", "pip", "install", "--upgrade", "cpersona"]
    assert sys.executable not in hint["command"]
