"""The alias ledger on its own (surface.md §7.6, §11.5): whatever sequence of subjects arrives,
each `(issuer, sub)` keeps one alias, no two share one, and a reload from disk gives the same
mapping; the file is never left half-written or world-readable."""

from __future__ import annotations

import json
import stat
from pathlib import Path

from cpersona.server.oauth import Subject
from cpersona.server.subjects import AliasLedger
from hypothesis import given, settings
from hypothesis import strategies as st

issuers = st.sampled_from(["https://a.example", "https://b.example/realm", "http://127.0.0.1:9"])
subjects = st.text(min_size=1, max_size=12)


@settings(max_examples=25, deadline=None)
@given(arrivals=st.lists(st.tuples(issuers, subjects), min_size=1, max_size=25))
def test_ledger_aliases_are_stable_unique_and_persisted(tmp_path_factory, arrivals):
    path = tmp_path_factory.mktemp("ledger") / "alias_ledger.json"
    ledger = AliasLedger.load(path)
    seen: dict[tuple[str, str], str] = {}
    for issuer, sub in arrivals:
        alias, issued = ledger.alias(Subject(issuer, sub))
        assert issued == ((issuer, sub) not in seen)
        assert seen.setdefault((issuer, sub), alias) == alias
    assert len(set(seen.values())) == len(seen)
    reloaded = AliasLedger.load(path)
    for (issuer, sub), alias in seen.items():
        assert reloaded.alias(Subject(issuer, sub)) == (alias, False)
        assert reloaded.issued(alias)
    doc = json.loads(path.read_text(encoding="utf-8"))
    assert doc["version"] == 1
    assert {(i, s): a for i, subs in doc["aliases"].items() for s, a in subs.items()} == seen
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [p.name for p in path.parent.iterdir()] == [path.name]


def test_ledger_is_created_on_first_use_only(tmp_path: Path):
    path = tmp_path / "sub" / "alias_ledger.json"
    ledger = AliasLedger.load(path)
    assert not path.exists()
    assert not ledger.issued("u-000000000000")
    alias, issued = ledger.alias(Subject("https://a.example", "alice"))
    assert issued and path.exists()
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert json.loads(path.read_text())["aliases"] == {"https://a.example": {"alice": alias}}
