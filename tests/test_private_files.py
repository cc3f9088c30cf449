"""private_files (issue 33 item 3): what it creates is owner-only whatever the umask, even one
that would take bits from the owner, and what exists already keeps its mode."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from cpersona import private_files

#: No bits masked; the usual; one masking the owner's own write bit.
UMASKS = [0o000, 0o022, 0o277]


@pytest.fixture(params=UMASKS, ids=oct)
def umask(request: pytest.FixtureRequest) -> Iterator[int]:
    previous = os.umask(request.param)
    try:
        yield request.param
    finally:
        os.umask(previous)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_every_created_file_and_directory_is_owner_only(tmp_path: Path, umask: int) -> None:
    deep = private_files.make_dirs(tmp_path / "a" / "b" / "c")
    os.close(private_files.create(deep / "new"))
    private_files.reserve(deep / "reserved")
    os.close(private_files.open_or_create(deep / "lock"))
    private_files.write_atomically(deep / "whole.json", "{}\n")
    private_files.copy(deep / "whole.json", tmp_path / "elsewhere" / "copy.json")
    with private_files.open_new(deep / "text.txt", "w") as out:
        out.write("one\n")
    made = [p for p in tmp_path.rglob("*")]
    assert {p.name for p in made} == {
        "a", "b", "c", "new", "reserved", "lock", "whole.json", "elsewhere", "copy.json",
        "text.txt",
    }  # fmt: skip
    assert {p.name: mode(p) for p in made} == {
        p.name: (0o700 if p.is_dir() else 0o600) for p in made
    }
    assert (tmp_path / "elsewhere" / "copy.json").read_text() == "{}\n"


def test_a_file_that_exists_keeps_its_mode_and_create_refuses_it(tmp_path: Path) -> None:
    there = tmp_path / "there"
    there.write_text("mine")
    there.chmod(0o640)
    os.close(private_files.open_or_create(there))
    assert mode(there) == 0o640 and there.read_text() == "mine"
    with pytest.raises(FileExistsError):
        private_files.create(there)
    private_files.reserve(there, replace=True)
    assert mode(there) == 0o600 and there.read_text() == ""


def test_existing_directories_keep_their_mode(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o755)
    private_files.make_dirs(shared / "mine")
    assert mode(shared) == 0o755 and mode(shared / "mine") == 0o700


def test_a_replaced_file_is_whole_and_leaves_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "record.json"
    private_files.write_atomically(target, b"old")
    private_files.write_atomically(target, "new")
    assert target.read_bytes() == b"new"
    assert [p.name for p in tmp_path.iterdir()] == ["record.json"]
