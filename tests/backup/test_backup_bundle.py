"""`cpersona backup` and `cpersona restore` as an operator runs them (issue 14).

(a) a bundle holds the database, its calibration sidecar, the ACL and operating-context files,
owner-only, with a manifest whose checksums match; restored, the database passes the checkup
and answers recall exactly as the original does; (b) a tampered bundle (altered, missing or
unlisted file, no manifest) is refused and nothing is written; (c) a database holding rows is
not replaced without --force, and is with it; (d) an existing non-empty DEST is refused;
(e) large copies report progress on stderr; (f) a PostgreSQL database is refused with one
line naming pg_dump / pg_basebackup.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import stat
import subprocess
import sys
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from cpersona.commands import bundle
from cpersona.config import Settings
from cpersona.embedding.hashing import HashingProvider
from cpersona.engine import Engine
from cpersona.server.app import build_server
from mcp import Client

WAIT = 60.0  # seconds a command may take before the test fails (never a timing claim)
QUERIES = ("tea", "Kyoto garden", "東京の地図", "")
ACL = '{"clients": [{"client_id": "ops", "token": "s3cret-0123", "grants": {"*": "read"}}]}\n'
OC = '[registry]\nprojects = ["p1"]\n'


def settings_for(tmp: Path, db: Path) -> Settings:
    return Settings(
        db_path=str(db),
        embedding_mode="hashing",
        acl_file=str(tmp / "acl.json"),
        operating_context_path=str(tmp / "oc.toml"),
    )


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, "CPERSONA_EMBEDDING_MODE": "hashing", **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", *args], capture_output=True, text=True, env=full, timeout=WAIT
    )


def fill(db: Path) -> None:
    engine = Engine(Settings(db_path=str(db), embedding_mode="hashing"), embedder=HashingProvider())
    try:
        texts = ["tea with lemon", "a garden in Kyoto", "東京の地図を買った", "green tea again"]
        for i, text in enumerate(texts):
            engine.writer.store("a", {"id": str(i), "content": text}, "", "")
        engine.writer.archive_episode("a", "we talked about tea in Kyoto", [], "", False, "", "")
    finally:
        engine.close()


async def recall_answers(db: Path) -> list[str]:
    settings = Settings(db_path=str(db), embedding_mode="hashing")
    engine = Engine(settings, embedder=HashingProvider())
    try:
        async with Client(build_server(engine)) as client:
            out = []
            for query in QUERIES:
                result = await client.call_tool("recall", {"agent_id": "a", "query": query})
                out.append(result.content[0].text)
            return out
    finally:
        engine.close()


def memory_count(db: Path) -> int:
    with closing(sqlite3.connect(db)) as conn:
        return int(conn.execute("SELECT COUNT(*) FROM memories").fetchone()[0])


@pytest.fixture
def source(tmp_path: Path) -> Path:
    """A database with memories, an episode and a sidecar; ACL and OC files beside it."""
    db = tmp_path / "live" / "mem.db"
    db.parent.mkdir()
    fill(db)
    Path(f"{db}.calibration.json").write_text('{"global_threshold": 0.42}\n', encoding="utf-8")
    (tmp_path / "acl.json").write_text(ACL, encoding="utf-8")
    (tmp_path / "oc.toml").write_text(OC, encoding="utf-8")
    return db


def env_for(tmp: Path, db: Path) -> dict[str, str]:
    return {
        "CPERSONA_DB_PATH": str(db),
        "CPERSONA_ACL_FILE": str(tmp / "acl.json"),
        "CPERSONA_OPERATING_CONTEXT_PATH": str(tmp / "oc.toml"),
    }


@pytest.fixture
def made(tmp_path: Path, source: Path) -> Path:
    dest = tmp_path / "bundle"
    done = run("cpersona", "backup", str(dest), env=env_for(tmp_path, source))
    assert done.returncode == 0, done.stderr
    assert "wrote" in done.stderr
    return dest


def manifest(dest: Path) -> dict[str, Any]:
    return json.loads((dest / "manifest.json").read_text(encoding="utf-8"))


def test_backup_bundle_lists_every_file_with_its_checksum(made: Path, tmp_path: Path):
    files = {f["role"]: f for f in manifest(made)["files"]}
    assert set(files) == {"database", "calibration", "acl", "operating_context"}
    for entry in files.values():
        path = made / entry["name"]
        assert bundle.sha256_file(path) == entry["sha256"]
        assert path.stat().st_size == entry["bytes"]
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(made.stat().st_mode) == 0o700
    assert (made / "acl.json").read_text(encoding="utf-8") == ACL
    assert (made / "calibration.json").read_text(encoding="utf-8").startswith('{"global_')
    assert not list(tmp_path.glob(".bundle.partial-*"))


@pytest.mark.anyio
async def test_restore_passes_the_checkup_and_recalls_the_same(made, source, tmp_path):
    target = tmp_path / "new" / "restored.db"
    acl_out, oc_out = tmp_path / "new" / "acl.json", tmp_path / "new" / "oc.toml"
    done = run(
        "cpersona", "restore", str(made), "--db", str(target),
        "--acl-file", str(acl_out), "--operating-context-path", str(oc_out),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert acl_out.read_text(encoding="utf-8") == ACL
    assert oc_out.read_text(encoding="utf-8") == OC
    sidecar = Path(f"{target}.calibration.json")
    assert sidecar.read_text(encoding="utf-8") == '{"global_threshold": 0.42}\n'
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    checkup = run("cpersona.checkup", "--db", str(target))
    assert checkup.returncode == 0, checkup.stdout + checkup.stderr
    # The sidecar would calibrate the restored database differently from the original's
    # hashing run; recall is compared without it on both sides.
    sidecar.unlink()
    Path(f"{source}.calibration.json").unlink()
    assert await recall_answers(target) == await recall_answers(source)


def test_restore_without_side_destinations_leaves_them_in_the_bundle(made, tmp_path):
    target = tmp_path / "only-db.db"
    done = run("cpersona", "restore", str(made), "--db", str(target))
    assert done.returncode == 0, done.stderr
    assert "not restored" in done.stderr and "acl.json" in done.stderr
    assert memory_count(target) == 4


@pytest.mark.parametrize(
    "damage",
    ["flip-db-byte", "missing-sidecar", "missing-db", "no-manifest", "resized-acl", "renamed"],
)
def test_restore_refuses_a_tampered_bundle(made: Path, tmp_path: Path, damage: str):
    if damage == "flip-db-byte":
        with open(made / "cpersona.db", "r+b") as f:
            f.seek(5000)
            byte = f.read(1)
            f.seek(5000)
            f.write(bytes([byte[0] ^ 0x01]))
    elif damage == "missing-sidecar":
        (made / "calibration.json").unlink()
    elif damage == "missing-db":
        (made / "cpersona.db").unlink()
    elif damage == "no-manifest":
        (made / "manifest.json").unlink()
    elif damage == "resized-acl":
        with open(made / "acl.json", "a", encoding="utf-8") as f:
            f.write('{"client_id": "intruder", "token": "t", "grants": {"*": "read-write"}}')
    else:
        data = manifest(made)
        data["files"][0]["name"] = "other.db"
        (made / "manifest.json").write_text(json.dumps(data), encoding="utf-8")
    target = tmp_path / "target.db"
    done = run("cpersona", "restore", str(made), "--db", str(target))
    assert done.returncode == 2
    assert "cpersona restore: refused:" in done.stderr
    assert not target.exists()
    assert not Path(f"{target}.calibration.json").exists()


def test_restore_refuses_a_database_with_rows_unless_forced(made: Path, tmp_path: Path):
    target = tmp_path / "busy.db"
    engine = Engine(Settings(db_path=str(target), embedding_mode="hashing"))
    engine.writer.store("z", {"id": "keep", "content": "a row that must not be lost"}, "", "")
    engine.close()
    refused = run("cpersona", "restore", str(made), "--db", str(target))
    assert refused.returncode == 2
    assert "--force" in refused.stderr
    assert memory_count(target) == 1
    forced = run("cpersona", "restore", str(made), "--db", str(target), "--force")
    assert forced.returncode == 0, forced.stderr
    with closing(sqlite3.connect(target)) as conn:
        contents = {r[0] for r in conn.execute("SELECT content FROM memories")}
    assert "a row that must not be lost" not in contents
    assert "tea with lemon" in contents


def test_restore_into_an_empty_database_needs_no_force(made: Path, tmp_path: Path):
    target = tmp_path / "empty.db"
    Engine(Settings(db_path=str(target), embedding_mode="hashing")).close()  # schema, no rows
    done = run("cpersona", "restore", str(made), "--db", str(target))
    assert done.returncode == 0, done.stderr
    assert memory_count(target) == 4


def test_restore_refuses_a_file_that_is_not_a_database(made: Path, tmp_path: Path):
    target = tmp_path / "notes.txt"
    target.write_text("not a database, but someone's file", encoding="utf-8")
    done = run("cpersona", "restore", str(made), "--db", str(target))
    assert done.returncode == 2
    assert target.read_text(encoding="utf-8") == "not a database, but someone's file"


def test_backup_refuses_a_non_empty_destination(source: Path, tmp_path: Path):
    dest = tmp_path / "taken"
    dest.mkdir()
    (dest / "something").write_text("x", encoding="utf-8")
    done = run("cpersona", "backup", str(dest), env=env_for(tmp_path, source))
    assert done.returncode == 2
    assert "not an empty directory" in done.stderr
    assert sorted(p.name for p in dest.iterdir()) == ["something"]


def test_backup_refuses_a_missing_database(tmp_path: Path):
    done = run("cpersona", "backup", str(tmp_path / "b"), "--db", str(tmp_path / "none.db"))
    assert done.returncode == 2
    assert not (tmp_path / "none.db").exists()
    assert not (tmp_path / "b").exists()


def test_backup_of_a_postgresql_database_points_to_its_own_tools(source: Path, tmp_path: Path):
    """With CPERSONA_DATABASE_URL set there is no file to copy: one line names the tools that
    back PostgreSQL up, without the URL's password; nothing is written. `--db FILE` still
    backs up that SQLite file."""
    url = "postgresql://mem:pa55word@db.internal:5432/cpersona"
    env = {**env_for(tmp_path, source), "CPERSONA_DATABASE_URL": url}
    done = run("cpersona", "backup", str(tmp_path / "b"), env=env)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "cpersona backup: the database is PostgreSQL "
        "(postgresql://mem@db.internal:5432/cpersona): back it up with pg_dump, "
        "pg_basebackup or your provider's snapshots (docs/scale-out.md)"
    ]
    assert not (tmp_path / "b").exists()
    done = run("cpersona", "backup", str(tmp_path / "c"), "--db", str(source), env=env)
    assert done.returncode == 0, done.stderr
    assert {f["role"] for f in manifest(tmp_path / "c")["files"]} >= {"database"}


def test_backup_and_restore_report_progress_on_stderr(source, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(bundle, "PROGRESS_MIN_PAGES", 1)
    settings = settings_for(tmp_path, source)
    dest = tmp_path / "progress"
    bundle.create(settings, dest, progress=bundle.ProgressLine("backup copied"), step_pages=2)
    bundle.restore(dest, str(tmp_path / "p.db"), progress=bundle.ProgressLine("restore copied"))
    err = capsys.readouterr().err.splitlines()
    backup_lines = [line for line in err if line.startswith("cpersona: backup copied")]
    assert len(backup_lines) >= 2
    assert backup_lines[-1].startswith("cpersona: backup copied 100%")
    assert any(line.startswith("cpersona: restore copied 100%") for line in err)


def test_restore_refuses_an_existing_side_file_named_with_a_tilde(made: Path, tmp_path: Path):
    home = tmp_path / "home"
    home.mkdir()
    mine = home / "acl.json"
    mine.write_text('{"clients": []}\n', encoding="utf-8")
    target = tmp_path / "t.db"
    # `--opt=~/x` reaches the command unexpanded; the file written is the expanded one.
    done = run(
        "cpersona", "restore", str(made), "--db", str(target), "--acl-file=~/acl.json",
        env={"HOME": str(home)},
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "--force" in done.stderr
    assert mine.read_text(encoding="utf-8") == '{"clients": []}\n'
    assert not target.exists()
    forced = run(
        "cpersona", "restore", str(made), "--db", str(target), "--acl-file=~/acl.json",
        "--force", env={"HOME": str(home)},
    )  # fmt: skip
    assert forced.returncode == 0, forced.stderr
    assert mine.read_text(encoding="utf-8") == ACL
    assert not (tmp_path / "~").exists()


def test_a_restored_acl_file_is_never_readable_by_others(
    made: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """The tokens are written into a file that is owner-only already (umask 022 otherwise
    gives 0644 until a later chmod)."""
    modes: list[int] = []
    real_copyfile, real_copyfileobj = shutil.copyfile, shutil.copyfileobj

    def copyfile(src: Any, dst: Any, **kw: Any) -> Any:
        out = real_copyfile(src, dst, **kw)
        modes.append(stat.S_IMODE(os.stat(dst).st_mode))
        return out

    def copyfileobj(src: Any, dst: Any, *args: Any) -> None:
        real_copyfileobj(src, dst, *args)
        modes.append(stat.S_IMODE(os.fstat(dst.fileno()).st_mode))

    monkeypatch.setattr(shutil, "copyfile", copyfile)
    monkeypatch.setattr(shutil, "copyfileobj", copyfileobj)
    previous = os.umask(0o022)
    try:
        bundle.restore(made, str(tmp_path / "r.db"), acl_file=str(tmp_path / "out" / "acl.json"))
    finally:
        os.umask(previous)
    assert modes and set(modes) == {0o600}
    assert (tmp_path / "out" / "acl.json").read_text(encoding="utf-8") == ACL


def test_backup_takes_an_acl_file_configured_with_a_tilde(source: Path, tmp_path: Path):
    home = tmp_path / "home"
    home.mkdir()
    (home / "acl.json").write_text(ACL, encoding="utf-8")
    env = {**env_for(tmp_path, source), "HOME": str(home), "CPERSONA_ACL_FILE": "~/acl.json"}
    done = run("cpersona", "backup", str(tmp_path / "b"), env=env)
    assert done.returncode == 0, done.stderr
    listed = {f["role"]: f for f in manifest(tmp_path / "b")["files"]}
    assert listed["acl"]["source"] == str(home / "acl.json")
    assert (tmp_path / "b" / "acl.json").read_text(encoding="utf-8") == ACL
