"""Index files on several hosts over one database (PostgreSQL, docs/fts-index.md): each host
keeps its own file in its cache directory, and one host trimming the change log must never
leave another host's file silently behind. Two files over one database stand for two hosts;
the behaviour is the same on both backends, so both run it.
"""

from __future__ import annotations

from pathlib import Path

import cpersona.fts.index as ix
import pytest
from cpersona import _backend
from cpersona.derived.placement import cache_base
from cpersona.fts.format import read_header
from cpersona.fts.index import FtsIndex
from cpersona.storage.pg import horizons
from fts_support import HAS_CORE, indexed, scope

kernels = _backend.from_environment()

pytestmark = pytest.mark.skipif(not HAS_CORE, reason="the full-text index needs the Rust core")


def _store(db, texts: list[str]) -> None:
    with db.atomic() as conn:
        for text in texts:
            conn.execute(
                "INSERT INTO memories(agent_id, content, timestamp) VALUES ('a', ?, '')", (text,)
            )


def _host(db, directory: Path, keep_log: int = 0) -> FtsIndex:
    directory.mkdir(parents=True, exist_ok=True)
    return FtsIndex(db, "memories", kernels.FtsIndex, base=directory / "index", keep_log=keep_log)


def _ids(index: FtsIndex) -> set[int]:
    return set(index.current().ids().tolist())


def test_a_host_behind_another_hosts_trim_rebuilds(lexical_db, tmp_path, monkeypatch):
    db = lexical_db()
    monkeypatch.setattr(ix, "TRIM_EVERY", 3)
    # PostgreSQL keeps entries other hosts may need for RETAIN_SECONDS whoever applied them:
    # this is what happens to a host behind by longer than that.
    monkeypatch.setattr(horizons, "RETAIN_SECONDS", 0)
    one, two = _host(db, tmp_path / "one"), _host(db, tmp_path / "two")
    _store(db, ["maybe the promotion 0", "hiring decided 1"])
    one.sync()
    two.sync()
    _store(db, [f"the promotion party {i}" for i in range(6)])
    one.sync()  # appends what was logged and trims the log up to it
    assert ix.fts_sql.trimmed_upto(db, "memories") > 0
    # `two` has applied less than what was trimmed: replaying cannot bring it current.
    got = indexed(two, "party", scope("a"), 50)
    assert got == indexed(one, "party", scope("a"), 50)
    assert got is not None and len(got) == 6
    assert two.verify() == [] and one.verify() == []
    one.close()
    two.close()


def test_a_trim_between_the_history_check_and_the_read_is_caught(lexical_db, tmp_path, monkeypatch):
    """The race of two hosts: `two` found its file current enough, then `one` trimmed entries
    `two` had not applied before `two` read them. The read says so, and `two` rebuilds."""
    db = lexical_db()
    monkeypatch.setattr(ix, "TRIM_EVERY", 3)
    one, two = _host(db, tmp_path / "one"), _host(db, tmp_path / "two")
    _store(db, ["first row"])
    one.sync()
    two.sync()
    _store(db, [f"hiring decided {i}" for i in range(6)])
    one.sync()
    # What `two` saw before `one` trimmed: nothing trimmed yet.
    monkeypatch.setattr(ix.fts_sql, "trimmed_upto", lambda db, table: 0)
    got = indexed(two, "hiring decided", scope("a"), 50)
    assert got is not None and len(got) == 6
    assert _ids(two) == _ids(one)
    one.close()
    two.close()


def _generation(index: FtsIndex) -> int:
    with open(index.path, "rb") as f:
        header = read_header(f.fileno())
    assert header is not None
    return header.generation


def test_the_shared_tail_keeps_hosts_a_little_behind_replaying(lexical_db, tmp_path, monkeypatch):
    db = lexical_db()
    monkeypatch.setattr(ix, "TRIM_EVERY", 3)
    one, two = _host(db, tmp_path / "one", keep_log=4), _host(db, tmp_path / "two", keep_log=4)
    _store(db, ["first row"])
    one.sync()
    _store(db, [f"maybe {i}" for i in range(3)])
    two.sync()  # applied 4 entries
    generation = _generation(two)
    _store(db, [f"maybe more {i}" for i in range(4)])
    one.sync()  # applied 8: trims up to 8 - 4, what `two` has applied
    if db.dialect == "sqlite":
        assert ix.fts_sql.trimmed_upto(db, "memories") == 4
    else:  # a horizon keeps the tail by age (horizons.RETAIN_SECONDS): nothing went yet
        assert ix.fts_sql.trimmed_upto(db, "memories") == 0
    two.sync()
    assert _generation(two) == generation  # appended to, not rebuilt
    assert _ids(two) == _ids(one) and len(_ids(one)) == 8
    one.close()
    two.close()


def test_cache_base_is_one_directory_per_database(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    url = "postgresql://app@db1:5432/memory"
    a = cache_base(None, url)
    assert a.parent.parent == tmp_path / "home" / ".cache" / "cpersona"
    assert (a.parent / "database.txt").read_text() == url + "\n"
    assert a.parent.stat().st_mode & 0o077 == 0
    assert cache_base(None, url) == a
    assert cache_base(None, "postgresql://app@db1:5432/other") != a
    assert cache_base(None, url + "?options=-csearch_path%3Dteam2") != a
    mine = cache_base(str(tmp_path / "mine"), url)
    assert mine.parent.parent == tmp_path / "mine" and mine.name == a.name
