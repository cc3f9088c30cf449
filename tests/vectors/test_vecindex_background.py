"""No call waits for a rebuild (issue 20 item 2): a file that is missing or stale is rebuilt in
the background while scans answer from SQLite with the same rows; a rebuild that fails or is
killed half way leaves the old file or none, never a half-written one that is used; one
process per host rebuilds, the others use its file; `cpersona index status` and check_health
show how far it is."""

from __future__ import annotations

import errno
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

import cpersona.derived.healing as healing
import cpersona.vectors.index as vector_index
import pytest
from cpersona.engine import Engine
from cpersona.health.context import from_engine
from cpersona.health.registry import check_health
from support.gate import Gate
from test_vecindex_healing import DAMAGE, answers, populate, write_field
from vecindex_support import TABLES, new_engine

HERE = Path(__file__).parent
#: Files found unusable by the sync (not by the scan): missing, an older format, a writer that
#: died, another database's, cut short, from a later point of this database's history.
STALE = {
    **{k: DAMAGE[k] for k in ("missing", "bad-version", "dirty", "foreign-db", "one-byte-short")},
    "ahead-of-log": lambda p, o: write_field(p, 32, 8, 10**9),
}


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("template")
    for name, n in (("m.db", 40), ("other.db", 60)):
        engine = new_engine(root / name)
        populate(engine, n=n)
        engine.close()
    return root


@pytest.fixture
def world(template: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the template; every rebuild runs in the background, one row per step."""
    for f in template.iterdir():
        shutil.copy2(f, tmp_path / f.name)
    monkeypatch.setattr(healing, "INLINE_ROWS", 0)
    monkeypatch.setattr(healing, "STEP_ROWS", 1)
    return tmp_path


@pytest.fixture
def engine(world: Path) -> Iterator[Engine]:
    engine = new_engine(world / "m.db")
    yield engine
    engine.close()


@pytest.mark.parametrize("kind", STALE)
@pytest.mark.parametrize("table", TABLES)
def test_a_scan_during_the_rebuild_answers_at_once_with_the_same_rows(
    kernels: ModuleType,
    world: Path,
    engine: Engine,
    monkeypatch: pytest.MonkeyPatch,
    kind: str,
    table: str,
) -> None:
    index = engine.indexes[table]
    after_rebuild = answers(engine, table, kernels)
    STALE[kind](index.path, world / "other.db")
    gate = Gate(monkeypatch, vector_index, "append_row")
    during = answers(engine, table, kernels)  # starts the rebuild, which the gate holds
    assert gate.held.wait(60)
    # The rebuild is still held: the scans above did not wait for it.
    assert index.healing
    assert during == after_rebuild
    assert answers(engine, table, kernels) == after_rebuild
    gate.release()
    index.wait_for_healing()
    assert not index.healing
    status = index.status()
    assert (status.usable, status.reason, status.rebuild) == (True, "current", None), status
    assert index.verify() == []
    assert answers(engine, table, kernels) == after_rebuild


def removed_and_gated(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, Gate]:
    """The memories index with its file removed, and the gate that will hold its rebuild."""
    index = engine.indexes["memories"]
    index.path.unlink()
    return index, Gate(monkeypatch, vector_index, "append_row")


def test_writes_during_the_rebuild_are_in_the_rebuilt_file(
    rust_kernels: ModuleType, world: Path, engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    index, gate = removed_and_gated(engine, monkeypatch)
    engine.writer.store("a", {"content": "the write that starts the rebuild"}, "", "")
    assert gate.held.wait(60)
    for i in range(5):  # land between the rebuild's snapshot and its swap
        engine.writer.store("a", {"content": f"written while the rebuild runs {i}"}, "", "")
    engine.writer.delete_memory(1, "a")
    during = answers(engine, "memories", rust_kernels)
    gate.release()
    index.wait_for_healing()
    assert index.verify() == []
    assert answers(engine, "memories", rust_kernels) == during


def test_progress_in_index_status_and_check_health(
    rust_kernels: ModuleType, world: Path, engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    index, gate = removed_and_gated(engine, monkeypatch)
    answers(engine, "memories", rust_kernels)
    assert gate.held.wait(60)
    live = 40 - 3
    progress = index.status().rebuild
    assert progress is not None
    assert (progress.pid, progress.done, progress.total) == (os.getpid(), 2, live)
    assert progress.reason == "missing"
    # Another process (the command line) reads the same progress.
    r = subprocess.run(
        [sys.executable, "-m", "cpersona", "index", "status", "--kind", "vector"],
        env={**os.environ, "CPERSONA_DB_PATH": str(world / "m.db")},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 1, r.stderr
    first = r.stdout.splitlines()[0]
    assert first.startswith(f"memories: {index.path}: not usable (missing); rebuilding in the ")
    assert first.endswith(f"(process {os.getpid()}, missing): 2/{live} rows (5%)")
    report = check_health(from_engine(engine), requested=["vector_index"])
    found = [i for i in report["issues"] if i["check"] == "vector_index"]
    assert [(i["type"], i["table"], i["done"], i["total"]) for i in found] == [
        ("vector_index_rebuilding", "memories", 2, live)
    ]
    gate.release()
    index.wait_for_healing()
    assert index.status().rebuild is None
    report = check_health(from_engine(engine), requested=["vector_index"])
    assert [i for i in report["issues"] if i["check"] == "vector_index"] == []


def leftovers(world: Path, table: str) -> list[str]:
    """Files of the index other than the file, its checksums and its lock files."""
    kept = {f"m.db.{table}.vec{suffix}" for suffix in ("", ".sum", ".lock", ".rebuild")}
    names = [p.name for p in world.iterdir() if p.name.startswith(f"m.db.{table}.vec")]
    return sorted(name for name in names if name not in kept)


@pytest.mark.parametrize("kind", ["missing", "bad-version"])
def test_a_rebuild_that_fails_half_way_leaves_the_old_file_or_none(
    rust_kernels: ModuleType,
    world: Path,
    engine: Engine,
    monkeypatch: pytest.MonkeyPatch,
    kind: str,
) -> None:
    index = engine.indexes["memories"]
    after_rebuild = answers(engine, "memories", rust_kernels)
    DAMAGE[kind](index.path, world / "other.db")
    old = index.path.read_bytes() if index.path.exists() else None
    original = vector_index.append_row
    rows = [0]

    def full_disk(*args: Any, **kwargs: Any) -> int:
        # Full from the tenth row on: a scan after the failure starts the rebuild again, and
        # when that happens is the scheduler's choice; every attempt then fails too.
        rows[0] += 1
        if rows[0] >= 10:
            raise OSError(errno.ENOSPC, "No space left on device")
        return original(*args, **kwargs)

    monkeypatch.setattr(vector_index, "append_row", full_disk)
    assert answers(engine, "memories", rust_kernels) == after_rebuild
    index.wait_for_healing()
    assert rows[0] >= 10  # it failed half way
    assert (index.path.read_bytes() if index.path.exists() else None) == old
    assert leftovers(world, "memories") == []
    assert answers(engine, "memories", rust_kernels) == after_rebuild  # the old file is not used
    monkeypatch.setattr(vector_index, "append_row", original)
    index.wait_for_healing()
    assert answers(engine, "memories", rust_kernels) == after_rebuild
    index.wait_for_healing()
    assert index.verify() == []


@contextmanager
def rebuilder(db: Path, table: str) -> Iterator[subprocess.Popen[str]]:
    """The child of vecindex_rebuilder.py, once it holds its rebuild half way."""
    with subprocess.Popen(
        [sys.executable, str(HERE / "vecindex_rebuilder.py"), str(db), table],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), *sys.path])},
    ) as child:
        assert child.stdout is not None
        line = child.stdout.readline()
        assert line == "HELD\n", line
        try:
            yield child
        finally:
            if child.poll() is None:
                child.kill()


@pytest.fixture
def after_rebuild(world: Path, rust_kernels: ModuleType) -> list[Any]:
    """What m.db's memories index answers while whole; then its file is removed, so the next
    engine has to rebuild it."""
    db = world / "m.db"
    reference = new_engine(db)
    expected = answers(reference, "memories", rust_kernels)
    reference.close()
    Path(f"{db}.memories.vec").unlink()
    return expected


def test_a_killed_rebuild_leaves_no_file_that_is_used(
    rust_kernels: ModuleType, world: Path, after_rebuild: list[Any]
) -> None:
    db = world / "m.db"
    with rebuilder(db, "memories") as child:
        child.send_signal(signal.SIGKILL)
        child.wait(60)
    assert leftovers(world, "memories") == [f"m.db.memories.vec.heal{child.pid}"]
    engine = new_engine(db)
    try:
        index = engine.indexes["memories"]
        status = index.status()
        assert (status.usable, status.reason, status.rebuild) == (False, "missing", None)
        assert answers(engine, "memories", rust_kernels) == after_rebuild  # from SQLite, rebuilding
        index.wait_for_healing()
        assert leftovers(world, "memories") == []  # the dead process's file is removed
        assert index.verify() == []
        assert answers(engine, "memories", rust_kernels) == after_rebuild
    finally:
        engine.close()


def test_one_process_rebuilds_the_others_use_its_file(
    rust_kernels: ModuleType, world: Path, after_rebuild: list[Any]
) -> None:
    db = world / "m.db"
    with rebuilder(db, "memories") as child:
        engine = new_engine(db)
        try:
            index = engine.indexes["memories"]
            # The child holds the rebuild: this process answers from SQLite, and waits its turn.
            assert answers(engine, "memories", rust_kernels) == after_rebuild
            assert index.healing
            progress = index.status().rebuild
            assert progress is not None and progress.pid == child.pid
            assert child.stdin is not None and child.stdout is not None
            child.stdin.write("go\n")
            child.stdin.flush()
            done = child.stdout.readline().split()
            assert child.wait(60) == 0
            index.wait_for_healing()
            # This process did not build a file of its own: the child's is the one in place.
            assert done == ["DONE", str(os.stat(index.path).st_ino)]
            assert answers(engine, "memories", rust_kernels) == after_rebuild
            assert index.verify() == []
        finally:
            engine.close()
