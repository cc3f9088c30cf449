"""Self-healing: an index file that is missing, truncated, corrupt, dirty or foreign is rebuilt
on the next scan (or write) and answers exactly like a fresh rebuild; `cpersona index`."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType

import cpersona.vectors.index as index_mod
import numpy as np
import pytest
from cpersona.embedding.hashing import HashingProvider
from cpersona.engine import Engine
from cpersona.vectors.format import HEADER_LEN, Layout
from cpersona.vectors.search import scan
from support.commands import index_command
from vecindex_support import TABLES, Probe, as_lists, check_probe, header_field, new_engine, scope

AGENTS = ("a", "b")


def populate(engine: Engine, n: int = 40) -> None:
    w = engine.writer
    for i in range(n):
        agent = AGENTS[i % 2]
        project = ("", "p1", "p2")[i % 3]
        channel = ("", "c1")[(i // 3) % 2]
        source = {"id": f"s{i % 4}"}
        out = w.store(
            agent, {"content": f"note {i} about topic {i % 5}", "source": source}, channel, project
        )
        assert out["result"] == "stored"
    for i in range(12):
        w.archive_episode(
            AGENTS[i % 2],
            f"episode {i} on topic {i % 5}",
            [],
            "",
            False,
            ("", "p1")[i % 2],
            ("", "c1")[(i // 2) % 2],
        )
    # a few deletions leave deleted slots behind
    for row in (3, 8, 15):
        w.delete_memory(row, AGENTS[(row - 1) % 2])


def probes(table: str) -> list[Probe]:
    emb = HashingProvider()
    out = []
    for text in ("topic 1 note", "episode topic 3", "unrelated words"):
        q = emb.embed([text])[0]
        for sc in (
            scope("a"),
            scope("b", "p1", "c1"),
            scope("a", "", ""),
            scope("a", None, "", "s1"),
        ):
            out.append(Probe(table, q, sc, window=12, reach=30, threshold=0.0, k=5, far_k=4))
            out.append(Probe(table, q, sc, window=0, reach=0, threshold=-1.0, k=100, far_k=100))
    return out


def answers(
    engine: Engine, table: str, kernels: ModuleType
) -> list[tuple[list[int], list[float], list[int], list[float]]]:
    index = engine.indexes[table]
    return [
        as_lists(scan(index, p.query, p.scope, p.limits, chunk_rows=p.chunk_rows, kernels=kernels))
        for p in probes(table)
    ]


def write_field(path: Path, offset: int, size: int, value: int) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(value.to_bytes(size, "little"))


def truncate(size: int | Callable[[int], int]) -> Callable[[Path, Path], None]:
    def damage(path: Path, other_db: Path) -> None:
        full = path.stat().st_size
        with open(path, "r+b") as f:
            f.truncate(size(full) if callable(size) else size)

    return damage


def copy_from_other_db(path: Path, other_db: Path) -> None:
    """The file of another database (more rows, a later applied_seq) copied over this one."""
    shutil.copyfile(Path(f"{other_db}.{path.name.split('.')[-2]}.vec"), path)


def other_table(path: Path, other_db: Path) -> None:
    """The other table's file of this same database (same db_uid, same applied_seq)."""
    table = path.name.split(".")[-2]
    swap = "episodes" if table == "memories" else "memories"
    shutil.copyfile(path.with_name(path.name.replace(table, swap)), path)


def order_out_of_range(path: Path, other_db: Path) -> None:
    dim, capacity = header_field(path, 12, 4), header_field(path, 24, 8)
    write_field(path, Layout.of(dim, capacity).offsets["order"], 4, 10**6)


DAMAGE: dict[str, Callable[[Path, Path], None]] = {
    "missing": lambda p, o: p.unlink(),
    "empty": truncate(0),
    "short-header": truncate(64),
    "header-only": truncate(HEADER_LEN),
    "one-byte-short": truncate(lambda n: n - 1),
    "oversized": truncate(lambda n: n + 64),
    "bad-magic": lambda p, o: write_field(p, 0, 8, int.from_bytes(b"NOTVECIX", "little")),
    "bad-version": lambda p, o: write_field(p, 8, 4, 1),
    "zero-dim": lambda p, o: write_field(p, 12, 4, 0),
    "huge-capacity": lambda p, o: write_field(p, 24, 8, 2**60),
    "count-over-capacity": lambda p, o: write_field(p, 16, 8, header_field(p, 24, 8) + 1),
    "order-out-of-range": order_out_of_range,
    "dirty": lambda p, o: write_field(p, 60, 4, 1),
    "foreign-db": copy_from_other_db,
    "other-table": other_table,
    "rewound": lambda p, o: write_field(p, 32, 8, 0),  # replays the whole log: idempotent
    "garbage": lambda p, o: p.write_bytes(os.urandom(p.stat().st_size)),
}


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two populated databases with their index files, built once and copied per test."""
    root = tmp_path_factory.mktemp("template")
    engine = new_engine(root / "m.db")
    populate(engine)
    engine.close()
    other = new_engine(root / "other.db")
    populate(other, n=60)  # a later applied_seq than m.db's
    other.close()
    return root


@pytest.fixture
def world_dir(template: Path, tmp_path: Path) -> Path:
    for f in template.iterdir():
        shutil.copy2(f, tmp_path / f.name)
    return tmp_path


@pytest.fixture
def damaged_world(world_dir: Path) -> Iterator[tuple[Engine, Path]]:
    engine = new_engine(world_dir / "m.db")
    yield engine, world_dir / "other.db"
    engine.close()


@pytest.mark.parametrize("kind", list(DAMAGE))
@pytest.mark.parametrize("table", TABLES)
def test_damaged_file_is_rebuilt_on_next_scan(
    kernels: ModuleType, damaged_world: tuple[Engine, Path], kind: str, table: str
) -> None:
    engine, other_db = damaged_world
    index = engine.indexes[table]
    index.rebuild()
    fresh = answers(engine, table, kernels)
    DAMAGE[kind](index.path, other_db)
    # The first scan after the damage answers like the fresh rebuild ...
    assert answers(engine, table, kernels) == fresh
    # ... and has left a sound, current file behind (damage found at open, rather than by
    # the sync, is rebuilt in the background: wait for it).
    index.wait_for_healing()
    status = index.status()
    assert status.usable and status.reason == "current", status
    assert index.verify() == []
    for p in probes(table):
        check_probe(engine.db, engine.indexes, p, exact_ref=False, kernels=kernels)


@pytest.mark.parametrize(
    "kind",
    [
        "missing",
        "short-header",
        "bad-magic",
        "dirty",
        "foreign-db",
        "other-table",
        "one-byte-short",
    ],
)
def test_damaged_file_is_rebuilt_by_the_next_write(
    damaged_world: tuple[Engine, Path], kind: str
) -> None:
    engine, other_db = damaged_world
    index = engine.indexes["memories"]
    DAMAGE[kind](index.path, other_db)
    out = engine.writer.store("a", {"content": "a new note after the damage"}, "", "")
    assert out["result"] == "stored"
    status = index.status()  # read-only: must not be what repaired the file
    assert status.usable and status.reason == "current", status
    assert index.verify() == []


def test_silent_corruption_is_found_by_verify(world_dir: Path) -> None:
    """A file that passes every structural check but holds wrong data: verify names the rows."""
    engine = new_engine(world_dir / "m.db")
    index = engine.indexes["memories"]
    dim, capacity = header_field(index.path, 12, 4), header_field(index.path, 24, 8)
    offsets = Layout.of(dim, capacity).offsets
    with open(index.path, "r+b") as f:
        f.seek(offsets["vectors"] + 3 * dim * 4)  # slot 3's first float
        f.write(np.float32(9.0).tobytes())
        f.seek(offsets["agent"] + 5 * 8)
        f.write((12345).to_bytes(8, "little"))
    problems = index.verify()
    assert any("vector differs" in p for p in problems), problems
    assert any("agent differs" in p for p in problems), problems
    index.rebuild()
    assert index.verify() == []
    engine.close()


# -- cpersona index status|rebuild|verify ---------------------------------------------------


def cli(db: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return index_command(db, *args, "--kind", "vector")


@pytest.fixture
def cli_db(world_dir: Path) -> Path:
    return world_dir / "m.db"


def vec(db: Path, table: str) -> Path:
    return Path(f"{db}.{table}.vec")


def test_cli_status_rebuild_verify(cli_db: Path) -> None:
    live = 40 - 3
    r = cli(cli_db, "status")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith(
        f"memories: {vec(cli_db, 'memories')}: usable, current; dim 384, "
        f"{live} rows (3 deleted slots), log seq "
    )
    assert lines[1].startswith(
        f"episodes: {vec(cli_db, 'episodes')}: usable, current; dim 384, 12 rows (0 deleted slots)"
    )

    for table in TABLES:
        vec(cli_db, table).unlink()
    r = cli(cli_db, "status")
    assert r.returncode == 1
    assert "memories: " in r.stdout and "not usable (missing); the server rebuilds it" in r.stdout

    r = cli(cli_db, "rebuild")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [
        f"memories: rebuilt, {live} rows",
        "episodes: rebuilt, 12 rows",
    ]
    assert f"memories: {live}/{live} rows (100%)" in r.stderr

    r = cli(cli_db, "status", "--table", "episodes")
    assert r.returncode == 0
    assert r.stdout.startswith("episodes: ") and "memories" not in r.stdout
    assert "12 rows (0 deleted slots)" in r.stdout

    r = cli(cli_db, "verify")
    assert (r.returncode, r.stdout) == (0, "memories: OK\nepisodes: OK\n"), r.stderr


def test_cli_status_reports_a_file_behind_the_log(cli_db: Path) -> None:
    engine = new_engine(cli_db)
    with engine.db.atomic() as conn:  # an outside writer: nothing syncs the index
        conn.execute("DELETE FROM memories WHERE id = 1")
    engine.close()
    r = cli(cli_db, "status", "--table", "memories")
    assert r.returncode == 0
    assert "usable, behind the log" in r.stdout
    r = cli(cli_db, "verify", "--table", "memories")  # verify brings it current first
    assert (r.returncode, r.stdout) == (0, "memories: OK\n")


@pytest.mark.parametrize(
    "kind",
    [
        "empty",
        "short-header",
        "bad-magic",
        "one-byte-short",
        "dirty",
        "bad-version",
        "zero-dim",
        "order-out-of-range",
        "garbage",
    ],
)
def test_cli_on_a_damaged_file(cli_db: Path, kind: str) -> None:
    DAMAGE[kind](vec(cli_db, "memories"), cli_db)
    r = cli(cli_db, "status")
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr
    first, second = r.stdout.splitlines()
    assert first.startswith("memories: ") and "not usable (" in first
    assert "usable, current" in second
    r = cli(cli_db, "verify")  # verify repairs first (as the server would), then compares
    assert (r.returncode, r.stdout) == (0, "memories: OK\nepisodes: OK\n"), r.stderr
    assert cli(cli_db, "status").returncode == 0


def test_cli_verify_exit_1_on_differences(cli_db: Path) -> None:
    path = vec(cli_db, "memories")
    dim, capacity = header_field(path, 12, 4), header_field(path, 24, 8)
    with open(path, "r+b") as f:
        f.seek(Layout.of(dim, capacity).offsets["vectors"])
        f.write(np.float32(7.0).tobytes())
    r = cli(cli_db, "verify")
    assert r.returncode == 1
    assert "vector differs" in r.stdout and "content checksum differs" in r.stdout
    assert "memories: 2 differences" in r.stdout and "episodes: OK" in r.stdout
    assert cli(cli_db, "rebuild").returncode == 0
    assert cli(cli_db, "verify").returncode == 0


@pytest.mark.parametrize("what", ["directory", "not-sqlite", "missing"])
def test_cli_exit_2_when_the_database_cannot_be_opened(tmp_path: Path, what: str) -> None:
    if what == "missing":  # a mistyped path: reported, not created
        db = tmp_path / "nowhere" / "typo.db"
        r = cli(db, "status")
        assert (r.returncode, r.stdout) == (2, "")
        assert f"no database at {db}" in r.stderr
        assert not db.parent.exists()
        return
    if what == "directory":
        db = tmp_path / "adir"
        db.mkdir(mode=0o700)
    else:
        db = tmp_path / "junk.db"
        db.write_bytes(b"this is not an SQLite database" * 200)
        db.chmod(0o600)
    r = cli(db, "status")
    assert r.returncode == 2
    assert "cannot open the database" in r.stderr


def test_verify_finds_structural_differences(tmp_path: Path) -> None:
    """Two live slots for one row, a wrong live counter, a scan order that repeats a slot."""
    from cpersona.vectors.format import VectorFileWriter

    engine = new_engine(tmp_path / "m.db")
    populate(engine, n=6)
    index = engine.indexes["memories"]
    with VectorFileWriter(index.path) as w:
        slot = int(np.flatnonzero((w.view("flags") & 1) == 0)[0])
        v = {name: int(w.view(name)[slot]) for name in ("agent", "project", "channel", "source")}
        w.append(
            int(w.view("ids")[slot]),
            int(w.view("keys")[slot]),
            vector=np.array(w.view("vectors")[slot]),
            **v,
        )
    problems = index.verify()
    assert any("two live slots" in p for p in problems), problems
    index.rebuild()
    with VectorFileWriter(index.path) as w:
        w.view("order")[1] = w.view("order")[0]
        w._hdr["live"] = 99  # the writer's own counter, damaged
    problems = index.verify()
    assert any("not a permutation" in p for p in problems), problems
    assert any("header counts 99 live slots" in p for p in problems), problems
    engine.close()


# -- files of this database, from another point of its history ------------------------------


def more_writes(engine: Engine) -> None:
    for i in range(30):
        engine.writer.store("a", {"content": f"later note {i} topic {i % 5}"}, "", "")
        engine.writer.store("b", {"content": f"later b note {i} topic {i % 5}"}, "c1", "p1")
    for row in (1, 2, 4, 5, 6, 7):
        engine.writer.delete_memory(row, AGENTS[(row - 1) % 2])
    for i in range(5):
        engine.writer.archive_episode("a", f"later episode {i}", [], "", False, "", "")


def check_all(engine: Engine, kernels: ModuleType | None = None) -> None:
    for table in TABLES:
        for p in probes(table):
            check_probe(engine.db, engine.indexes, p, exact_ref=False, kernels=kernels)
        assert engine.indexes[table].verify() == []


def test_database_restored_from_an_older_backup(kernels: ModuleType, world_dir: Path) -> None:
    """The database goes back in time, its index files (same db_uid) do not: the files are
    ahead of the database's log and must not be trusted."""
    db = world_dir / "m.db"
    shutil.copy2(db, world_dir / "backup.db")  # the template is closed: one consistent file
    engine = new_engine(db)
    more_writes(engine)
    engine.close()
    for suffix in ("", "-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)
    shutil.copy2(world_dir / "backup.db", db)
    engine = new_engine(db)
    try:
        check_all(engine, kernels)
    finally:
        engine.close()


def test_older_index_file_after_the_log_was_trimmed(
    kernels: ModuleType, world_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An index file from before the log entries it still needs were trimmed (a restored or
    rewound file): the log can no longer bring it current, so it must be rebuilt."""
    monkeypatch.setattr(index_mod, "TRIM_EVERY", 5)
    db = world_dir / "m.db"
    saved = {t: Path(f"{db}.{t}.vec").read_bytes() for t in TABLES}
    engine = new_engine(db)
    try:
        more_writes(engine)
        assert engine.db.query_one("SELECT COUNT(*) FROM vector_log")[0] < 20  # trimmed
        for table in TABLES:
            Path(f"{db}.{table}.vec").write_bytes(saved[table])
        check_all(engine, kernels)
    finally:
        engine.close()


# REPLACE fires delete triggers (recursive_triggers is on) and the update trigger watches `id`.
@pytest.mark.parametrize("write", ["insert-or-replace", "update-id"])
def test_writes_the_log_does_not_see(world_dir: Path, write: str) -> None:
    engine = new_engine(world_dir / "m.db")
    try:
        with engine.db.atomic() as conn:
            if write == "insert-or-replace":  # hits the (agent, project, channel, content) index
                row = conn.execute("SELECT * FROM memories WHERE id = 1").fetchone()
                conn.execute(
                    "INSERT OR REPLACE INTO memories(agent_id, project_id, channel, content, "
                    "timestamp, embedding) VALUES (?, ?, ?, ?, 't', ?)",
                    (
                        row["agent_id"],
                        row["project_id"],
                        row["channel"],
                        row["content"],
                        row["embedding"],
                    ),
                )
            else:
                conn.execute("UPDATE memories SET id = 1000 WHERE id = 1")
        check_all(engine)
    finally:
        engine.close()


def test_rebuild_while_rows_arrive(world_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Rows committed by another writer between the rebuild's row count and its row read (more
    than the spare slots) must not make the rebuild fail."""
    engine = new_engine(world_dir / "m.db")
    shape = index_mod.vector_sql.embedded_shape
    emb = HashingProvider()

    def shape_then_commit(db: object, table: str) -> tuple[int, int | None]:
        counted = shape(db, table)
        with engine.db.atomic() as conn:  # lands after the count, before the read
            for i in range(5):
                conn.execute(
                    "INSERT INTO memories(agent_id, content, timestamp, embedding) "
                    "VALUES ('a', ?, 't', ?)",
                    (f"arrived {i} {table}", emb.embed([f"arrived {i}"])[0].tobytes()),
                )
        return counted

    monkeypatch.setattr(index_mod, "HEADROOM", 1)
    monkeypatch.setattr(index_mod.vector_sql, "embedded_shape", shape_then_commit)
    try:
        engine.indexes["memories"].rebuild()
        monkeypatch.undo()
        check_all(engine)
    finally:
        engine.close()


def test_unwritable_index_falls_back_to_sqlite(
    kernels: ModuleType, world_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The index is optional (retrieval.md §4.4: any doubt falls back to the scan): when its file
    cannot be written (disk full), scans answer from SQLite and writes still succeed."""
    import errno

    from cpersona.vectors.format import VectorFileWriter

    def no_space(*args: object, **kwargs: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    engine = new_engine(world_dir / "m.db")
    try:
        for table in TABLES:
            engine.indexes[table].path.unlink()
        monkeypatch.setattr(VectorFileWriter, "create", no_space)
        out = engine.writer.store("a", {"content": "written while the disk is full"}, "", "")
        assert out["result"] == "stored"
        for table in TABLES:
            for p in probes(table):
                check_probe(engine.db, engine.indexes, p, exact_ref=False, kernels=kernels)
        monkeypatch.undo()
        check_all(engine, kernels)
    finally:
        engine.close()


def test_scan_inside_a_read_snapshot(world_dir: Path) -> None:
    """A scan (which brings the index current) from a thread whose reader is inside a read
    transaction, as the portability tools hold one: no 'transaction within a transaction'."""
    engine = new_engine(world_dir / "m.db")
    try:
        with engine.db.atomic() as conn:  # a change the index has not applied yet
            conn.execute("DELETE FROM memories WHERE id = 2")
        reader = engine.db.reader()
        reader.execute("BEGIN")
        try:
            for p in probes("memories"):
                check_probe(engine.db, engine.indexes, p, exact_ref=False)
        finally:
            reader.execute("COMMIT")
        check_all(engine)
    finally:
        engine.close()
