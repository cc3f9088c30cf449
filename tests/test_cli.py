"""The `cpersona` command as an operator meets it: --version, --help, and bad settings that stop
start-up with one line on stderr and no traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from child_env import inherited
from cpersona import __version__
from cpersona.cli import main

TIMEOUT = 60


def run(
    args: list[str], env: dict[str, str], tmp_path: Path, stdin: str = ""
) -> subprocess.CompletedProcess:
    base = inherited("SYSTEMROOT")
    base.setdefault("CPERSONA_DB_PATH", str(tmp_path / "cli.db"))
    base["CPERSONA_EMBEDDING_MODE"] = "hashing"
    return subprocess.run(
        [sys.executable, "-m", "cpersona", *args],
        env={**base, **env},
        input=stdin,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        cwd=tmp_path,
    )


def test_version(tmp_path):
    out = run(["--version"], {}, tmp_path)
    assert out.returncode == 0
    assert out.stdout.strip() == f"cpersona {__version__}"
    assert not (tmp_path / "cli.db").exists()  # nothing is opened


def test_help(tmp_path):
    out = run(["--help"], {}, tmp_path)
    assert out.returncode == 0
    assert out.stdout.startswith("usage: cpersona")
    assert "CPERSONA_" in out.stdout and "serve" in out.stdout
    assert out.stderr == ""


def test_console_script_is_installed(tmp_path):
    script = Path(sys.executable).with_name("cpersona")
    if not script.exists():
        pytest.skip("console script not beside this interpreter")
    out = subprocess.run(
        [str(script), "--version"], capture_output=True, text=True, timeout=TIMEOUT
    )
    assert (out.returncode, out.stdout.strip()) == (0, f"cpersona {__version__}")


@pytest.mark.parametrize(
    ("env", "name"),
    [
        ({"CPERSONA_MAX_CONTENT_LENGTH": "lots"}, "CPERSONA_MAX_CONTENT_LENGTH"),
        ({"CPERSONA_FTS_ENABLED": "yes"}, "CPERSONA_FTS_ENABLED"),
        ({"CPERSONA_FUTURE_TIMESTAMP_MODE": "explode"}, "CPERSONA_FUTURE_TIMESTAMP_MODE"),
        ({"CPERSONA_HTTP_PORT": "-1"}, "CPERSONA_HTTP_PORT"),
        ({"CPERSONA_COSINE_FLOOR": "nan"}, "CPERSONA_COSINE_FLOOR"),
        ({"CPERSONA_EMBEDDING_MODE": "", "EMBEDDING_MODE": "bogus"}, "EMBEDDING_MODE"),
    ],
)
def test_invalid_setting_stops_with_one_line(tmp_path, env, name):
    out = run([], env, tmp_path, stdin="")
    assert out.returncode != 0
    assert out.stdout == ""
    lines = out.stderr.splitlines()
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith(f"cpersona: {name}=")
    assert "Traceback" not in out.stderr
    assert not (tmp_path / "cli.db").exists()  # refused before touching the database


def test_invalid_setting_in_process(monkeypatch, capsys):
    monkeypatch.setenv("CPERSONA_RRF_K", "zero")
    assert main([]) != 0
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("cpersona: CPERSONA_RRF_K=")


def test_generic_embedding_alias_reaches_the_server(tmp_path):
    env = {"CPERSONA_EMBEDDING_MODE": "", "EMBEDDING_MODE": "none"}
    out = run([], env, tmp_path, stdin="")  # EOF on stdin: start, then a clean exit
    assert out.returncode == 0, out.stderr
    assert "embedder: none" in out.stderr
    assert out.stdout == ""


def test_unopenable_database_stops_with_one_line(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    out = run([], {"CPERSONA_DB_PATH": str(blocker / "mem.db")}, tmp_path)
    assert out.returncode != 0 and out.stdout == ""
    lines = out.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("cpersona: cannot open the database")


def test_not_a_database_stops_without_a_traceback(tmp_path):
    bad = tmp_path / "bad.db"
    bad.write_bytes(b"this is not an sqlite file at all" * 100)
    bad.chmod(0o600)
    out = run([], {"CPERSONA_DB_PATH": str(bad)}, tmp_path)
    assert out.returncode != 0 and out.stdout == ""
    assert "Traceback" not in out.stderr
    assert out.stderr.splitlines()[-1].startswith("cpersona: cannot open the database")
    assert bad.read_bytes() == b"this is not an sqlite file at all" * 100


def test_unauthenticated_http_transport_is_refused(tmp_path):
    # The HTTP transport itself is tested in tests/http; this is the one-line start-up refusal.
    out = run([], {"CPERSONA_TRANSPORT": "streamable-http"}, tmp_path)
    assert out.returncode != 0
    assert len(out.stderr.splitlines()) == 1 and "CPERSONA_AUTH_TOKEN" in out.stderr
    assert not (tmp_path / "cli.db").exists()


def test_directory_as_database_stops_with_one_line(tmp_path):
    folder = tmp_path / "a-directory"
    folder.mkdir(mode=0o755)
    out = run([], {"CPERSONA_DB_PATH": str(folder)}, tmp_path)
    assert out.returncode != 0 and out.stdout == ""
    lines = out.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("cpersona: cannot open the database"), lines
