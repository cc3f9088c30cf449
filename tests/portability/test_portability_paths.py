"""Path confinement of export_memories / import_memories: `..`, absolute paths outside the export
directory and symlinks out of it are refused with one clear error, and nothing is written or
read; the size cap and the non-file refusals come before any reading."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

pytestmark = pytest.mark.anyio

REFUSED = "rejected (path traversal or outside export dir): "


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    path = tmp_path / "outside"
    path.mkdir()
    return path


def planted(path: Path) -> Path:
    """A valid export file that must never be read."""
    path.write_text(
        '{"_type": "memory", "agent_id": "intruder", "content": "must not be imported"}\n',
        encoding="utf-8",
    )
    return path


async def test_portability_paths_export_refuses_escapes(tools, export_dir, outside):
    await tools("store", {"agent_id": "a", "message": {"content": "secret"}})
    (export_dir / "sub").mkdir()
    (export_dir / "link").symlink_to(outside, target_is_directory=True)
    (export_dir / "file-link.jsonl").symlink_to(outside / "target.jsonl")
    for path in [
        "../escape.jsonl",
        "sub/../../escape.jsonl",
        str(export_dir / ".." / "escape.jsonl"),
        str(outside / "abs.jsonl"),
        "/etc/cpersona-escape.jsonl",
        "link/via-dir.jsonl",
        str(export_dir / "link" / "via-dir.jsonl"),
        "file-link.jsonl",
    ]:
        out = await tools("export_memories", {"agent_id": "", "output_path": path})
        assert out == {"ok": False, "error": "output_path " + REFUSED + path}, path
    assert list(outside.iterdir()) == []
    assert not (export_dir.parent / "escape.jsonl").exists()
    assert sorted(p.name for p in export_dir.iterdir()) == ["file-link.jsonl", "link", "sub"]


async def test_portability_paths_import_refuses_escapes(tools, export_dir, outside):
    planted(outside / "evil.jsonl")
    (export_dir / "link").symlink_to(outside, target_is_directory=True)
    (export_dir / "evil.jsonl").symlink_to(outside / "evil.jsonl")
    before = tools.rows()
    for path in [
        "../outside/evil.jsonl",
        str(outside / "evil.jsonl"),
        "link/evil.jsonl",
        "evil.jsonl",
    ]:
        out = await tools("import_memories", {"input_path": path})
        assert out["ok"] is False and out["error"] == "input_path " + REFUSED + path, path
    assert tools.rows() == before


async def test_portability_paths_inside_and_symlinks_within(tools, export_dir):
    await tools("store", {"agent_id": "a", "message": {"content": "kept"}})
    (export_dir / "nested").mkdir()
    (export_dir / "alias").symlink_to(export_dir / "nested", target_is_directory=True)
    out = await tools("export_memories", {"agent_id": "a", "output_path": "alias/a.jsonl"})
    assert out["ok"] and out["path"] == str(export_dir / "nested" / "a.jsonl")
    out = await tools(
        "export_memories", {"agent_id": "a", "output_path": str(export_dir / "new-dir" / "b.jsonl")}
    )
    assert out["ok"]
    assert (export_dir / "new-dir").stat().st_mode & 0o777 == 0o700
    assert [p.name for p in (export_dir / "nested").iterdir()] == ["a.jsonl"]  # no temp left


async def test_portability_paths_without_export_dir(connect, tmp_path, outside):
    async with connect(export_dir=None) as tools:
        await tools("store", {"agent_id": "a", "message": {"content": "anywhere"}})
        out = await tools(
            "export_memories", {"agent_id": "", "output_path": str(outside / "abs.jsonl")}
        )
        assert out["ok"] and out["path"] == str(outside / "abs.jsonl")
        traversal = str(outside / ".." / "outside" / "x.jsonl")
        out = await tools("export_memories", {"agent_id": "", "output_path": traversal})
        assert out == {"ok": False, "error": "output_path " + REFUSED + traversal}
        out = await tools("import_memories", {"input_path": traversal})
        assert out["error"] == "input_path " + REFUSED + traversal


async def test_portability_paths_import_prechecks(connect, export_dir):
    async with connect(max_import_bytes=64) as tools:
        before = tools.rows()
        out = await tools("import_memories", {"input_path": "missing.jsonl"})
        assert out["error"] == "File not found: missing.jsonl"
        (export_dir / "adir").mkdir()
        out = await tools("import_memories", {"input_path": "adir"})
        assert out["error"] == "input_path is not a regular file: adir"
        for itself in (".", str(export_dir)):
            out = await tools("import_memories", {"input_path": itself})
            assert out["error"] == f"input_path is not a regular file: {itself}"
        os.mkfifo(export_dir / "fifo")
        out = await tools("import_memories", {"input_path": "fifo"})  # must not hang
        assert out["error"] == "input_path is not a regular file: fifo"
        big = planted(export_dir / "big.jsonl")
        assert big.stat().st_size > 64
        out = await tools("import_memories", {"input_path": "big.jsonl"})
        assert out["error"] == "input file exceeds MAX_IMPORT_BYTES (64): big.jsonl"
        (export_dir / "latin1.jsonl").write_bytes(b'{"x": "\xe9"}\n')
        out = await tools("import_memories", {"input_path": "latin1.jsonl"})
        assert out["error"].startswith("could not read latin1.jsonl: ")
        assert tools.rows() == before


async def test_portability_paths_export_write_failure_is_ok_false(tools, export_dir, tmp_path):
    (export_dir / "afile").write_text("not a directory")
    out = await tools("export_memories", {"agent_id": "", "output_path": "afile/x.jsonl"})
    assert out == {"ok": False, "error": "could not write afile/x.jsonl: File exists"}
    assert [p.name for p in export_dir.iterdir()] == ["afile"]


def _tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if not p.name.startswith("mem.db")}


async def test_portability_paths_export_to_a_directory_writes_nothing(tools, export_dir, tmp_path):
    """The export directory itself passes confinement (surface.md §8.1) but names no file: the
    answer says so, naming the caller's path, and no temp file lands beside it (issue 11)."""
    await tools("store", {"agent_id": "a", "message": {"content": "kept inside"}})
    (export_dir / "taken").mkdir()
    before = _tree(tmp_path)
    for path in [".", "./", str(export_dir), str(export_dir) + "/", "taken", "taken/."]:
        out = await tools("export_memories", {"agent_id": "", "output_path": path})
        assert out == {"ok": False, "error": f"output_path names a directory, not a file: {path}"}
        assert _tree(tmp_path) == before, path
    out = await tools("export_memories", {"agent_id": "", "output_path": "taken/x.jsonl"})
    assert out["ok"] is True
    assert _tree(tmp_path) == before | {"exports/taken/x.jsonl"}


async def test_portability_paths_export_dir_not_created_yet(connect, tmp_path):
    later = tmp_path / "later"
    async with connect(export_dir=str(later)) as tools:
        before = _tree(tmp_path)
        for path in [".", str(later)]:
            out = await tools("export_memories", {"agent_id": "", "output_path": path})
            assert out["error"] == f"output_path names a directory, not a file: {path}"
            assert _tree(tmp_path) == before
        assert (await tools("export_memories", {"agent_id": "", "output_path": "x.jsonl"}))["ok"]
        assert _tree(tmp_path) == before | {"later", "later/x.jsonl"}


async def test_portability_paths_errors_never_show_server_paths(connect, export_dir, tmp_path):
    (export_dir / "afile").write_text("not a directory")
    (export_dir / "locked").mkdir(mode=0o500)
    calls = [
        ("export_memories", {"agent_id": "", "output_path": "."}),
        ("export_memories", {"agent_id": "", "output_path": "afile/x.jsonl"}),
        ("import_memories", {"input_path": "."}),
        ("import_memories", {"input_path": "missing.jsonl"}),
        ("import_memories", {"input_path": "afile/x.jsonl"}),
    ]
    if os.geteuid() != 0:  # root writes through a 0500 directory
        calls.append(("export_memories", {"agent_id": "", "output_path": "locked/x.jsonl"}))
    async with connect() as tools:
        for name, args in calls:
            out = await tools(name, args)
            assert out["ok"] is False, (name, args, out)
            assert str(tmp_path) not in out["error"], out
