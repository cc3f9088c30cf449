"""The wheel as users install it (issue 14): `maturin build --release` makes one manylinux, abi3
wheel carrying the extension, the tokenizer data, the agent skill and the web view's files;
installed into a fresh virtual environment (no system packages, run from outside the source
tree, no PYTHONPATH), `cpersona --version` answers and a stdio server lists its 34 tools,
stores and recalls."""

from __future__ import annotations

import json
import os
import queue
import re
import shutil
import subprocess
import sys
import threading
import venv
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from cpersona import __version__

ROOT = Path(__file__).resolve().parents[1]
WAIT = 600  # a cold release build on a 2-core machine; never a timing claim
STDIO_WAIT = 120  # one answer of the installed stdio server (the first loads the model)
NEEDED = [
    "cpersona/_core.abi3.so",
    "cpersona/embedding/data/minilm-tokenizer.json",
    "cpersona/skills/cpersona-memory/SKILL.md",
    "cpersona/web/templates/base.html",
    "cpersona/web/static/style.css",
]

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not (ROOT / "Cargo.toml").exists() or shutil.which("cargo") is None:
        pytest.skip("needs the source tree and a Rust toolchain to build the wheel")
    out = tmp_path_factory.mktemp("dist")
    build = subprocess.run(
        [sys.executable, "-m", "maturin", "build", "--release", "-o", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=WAIT,
    )
    assert build.returncode == 0, build.stderr[-4000:]
    wheels = list(out.glob("*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The `bin` folder of a fresh virtualenv with only the wheel (and its dependencies)."""
    root = tmp_path_factory.mktemp("clean-env")
    venv.EnvBuilder(with_pip=True, system_site_packages=False).create(root)
    python = root / "bin" / "python"
    pip = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", str(wheel)],
        capture_output=True,
        text=True,
        timeout=WAIT,
        env=clean_env(),
    )
    assert pip.returncode == 0, pip.stderr[-4000:]
    yield root / "bin"


def clean_env(**extra: str) -> dict[str, str]:
    """No PYTHONPATH, no source tree: what a user's shell has (and the run's own cache
    directory, where the installed server records its handshake)."""
    keep = ("PATH", "HOME", "LANG", "XDG_CACHE_HOME")
    keep += ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_CACHE_DIR")
    return {**{k: os.environ[k] for k in keep if k in os.environ}, **extra}


def test_the_wheel_is_manylinux_abi3_and_carries_its_files(wheel: Path):
    assert re.fullmatch(
        rf"cpersona-{re.escape(__version__)}-cp311-abi3-manylinux_\d+_\d+_x86_64\.whl",
        wheel.name,
    ), wheel.name
    with zipfile.ZipFile(wheel) as whl:
        names = set(whl.namelist())
    missing = [n for n in NEEDED if n not in names]
    assert not missing, missing
    assert not any(n.startswith(("tests/", "benches/", "rust/")) for n in names)


def test_the_installed_copy_runs_from_its_environment(installed: Path, tmp_path: Path):
    version = subprocess.run(
        [str(installed / "cpersona"), "--version"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=clean_env(),
        timeout=60,
    )
    assert version.returncode == 0, version.stderr
    assert version.stdout.strip() == f"cpersona {__version__}"
    where = subprocess.run(
        [str(installed / "python"), "-c", "import cpersona._core as c, cpersona; "
         "print(cpersona.__file__); print(c.__file__)"],
        capture_output=True, text=True, cwd=tmp_path, env=clean_env(), timeout=60,
    )  # fmt: skip
    assert where.returncode == 0, where.stderr
    for path in where.stdout.split():
        assert path.startswith(str(installed.parent)), path
        assert not path.startswith(str(ROOT))
    assert (installed / "cpersona-policy").exists()


def test_the_installed_stdio_server_stores_and_recalls(installed: Path, tmp_path: Path):
    requests = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "wheel-test", "version": "1"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
        {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "store",
            "arguments": {"agent_id": "a", "message": {"content": "the wheel works"}}}},
        {"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": "recall",
            "arguments": {"agent_id": "a", "query": "wheel"}}},
    ]  # fmt: skip
    env = clean_env(
        CPERSONA_DB_PATH=str(tmp_path / "mem.db"),
        CPERSONA_EMBEDDING_MODE="local-minilm",  # the embedded model, from the installed deps
    )
    # Requests one at a time: the next is written once the previous answer arrived.
    proc = subprocess.Popen(
        [str(installed / "cpersona")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=tmp_path,
        env=env,
    )
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    # Lines are read in a thread so that every wait is bounded: a server that hangs fails the
    # test instead of blocking the suite on readline().
    lines: queue.Queue[bytes] = queue.Queue()

    def read() -> None:
        assert proc.stdout is not None
        for raw in proc.stdout:
            lines.put(raw)
        lines.put(b"")  # EOF: the server exited

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    answers: dict[int, dict[str, object]] = {}
    try:
        for request in requests:
            proc.stdin.write(json.dumps(request).encode() + b"\n")
            proc.stdin.flush()
            if "id" not in request:
                continue
            try:
                line = lines.get(timeout=STDIO_WAIT)
            except queue.Empty:
                raise AssertionError(f"no answer to {request['id']} in {STDIO_WAIT}s") from None
            assert line, proc.stderr.read().decode(errors="replace")
            answer = json.loads(line)
            answers[answer["id"]] = answer
        proc.stdin.close()
        assert proc.wait(timeout=STDIO_WAIT) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=STDIO_WAIT)
        reader.join(timeout=STDIO_WAIT)
        proc.stdout.close()
        proc.stderr.close()
    assert len(answers[2]["result"]["tools"]) == 34  # type: ignore[index]
    stored = json.loads(answers[3]["result"]["content"][0]["text"])  # type: ignore[index]
    assert stored == {"ok": True, "result": "stored", "id": 1, "embedded": True}
    recalled = json.loads(answers[4]["result"]["content"][0]["text"])  # type: ignore[index]
    assert [m["content"] for m in recalled["messages"]] == ["the wheel works"]
