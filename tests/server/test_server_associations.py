"""CPersona 2.6's associative tools through a real MCP client, on both backends (issue 32):
declare_associations, traverse, store's `associations`, the recall of declared supersession,
and the 2.6.14 fixture's declarations read as 2.6.14 answered them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from support.fixtures import FIXTURES, copy_database

pytestmark = pytest.mark.anyio

ASSOCIATIONS_DB = FIXTURES / "cpersona-2.6.14-associations.db"
REFERENCE = FIXTURES / "cpersona-2.6.14-associations.json"


def reference() -> dict[str, Any]:
    if not REFERENCE.exists():
        pytest.skip(f"fixture answers not found: {REFERENCE}")
    answers: dict[str, Any] = json.loads(REFERENCE.read_text())["reference"]
    return answers


def refs(answer: dict[str, Any]) -> list[str]:
    return [m.get("ref", "") for m in answer["messages"]]


async def store(tools: Any, content: str, **extra: Any) -> int:
    out = await tools("store", {"agent_id": "a", "message": {"content": content}, **extra})
    assert out["result"] == "stored", out
    return int(out["id"])


# --------------------------------------------------------------------------- the 2.6.14 store


@pytest.mark.parametrize("store_backend", ["sqlite"])  # the fixture is an SQLite file
async def test_the_2_6_14_stores_declarations_answer_as_2_6_14_did(
    connect: Any, tmp_path: Path
) -> None:
    db = copy_database(ASSOCIATIONS_DB, tmp_path / "memory.db")
    async with connect(db_path=str(db)) as tools:
        walked = await tools("traverse", {"agent_id": "alice", "entity": "alice", "max_hops": 2})
        by_alias = await tools("traverse", {"agent_id": "alice", "entity": "GHA", "max_hops": 0})
        absent = await tools("traverse", {"agent_id": "alice", "entity": "nobody"})
    assert walked == reference()["traverse_alice"]
    assert [e["name"] for e in by_alias["entities"]] == ["GitHub Actions"]
    assert by_alias["relations"] == []
    assert absent["reason"] == "no_such_entity" and absent["entities"] == []


@pytest.mark.parametrize("store_backend", ["sqlite"])
async def test_the_2_6_14_stores_superseded_standup_stays_out_of_recall(
    connect: Any, tmp_path: Path
) -> None:
    # 2.6.14 ranked the superseded 10:00 first; its vectors are another embedder's here, so
    # the deep gate lets the lexical arms answer.
    assert refs(reference()["recall_standup"])[-1] == "mem:4"
    db = copy_database(ASSOCIATIONS_DB, tmp_path / "memory.db")
    ask = {"agent_id": "alice", "query": "When is the team standup?", "deep": True}

    def asking(query: str) -> dict[str, Any]:
        return {**ask, "query": query}

    async with connect(db_path=str(db)) as tools:
        plain = await tools("recall", ask)
        both = await tools("recall", {**ask, "include_superseded": True})
        # Since English stopwords leave the MATCH terms (issue 30), each question reaches
        # only its own rows: the corrected password, the contradiction and the supported
        # fact are asked on their own.
        password = await tools("recall", asking("staging database password"))
        billing = await tools("recall", asking("Who maintains the billing service?"))
        deploy = await tools("recall", asking("Does the deploy script need --force?"))
    got = refs(plain)
    assert "mem:21" in got and "mem:4" not in got
    assert "mem:20" in refs(password) and "mem:2" not in refs(password)  # corrected by mem:20
    newest = next(m for m in plain["messages"] if m["ref"] == "mem:21")
    assert newest["replaces"] == [{"ref": "mem:4", "role": "supersedes"}]
    kept = {m["ref"]: m for m in both["messages"]}
    assert kept["mem:4"]["replaced_by"] == [{"ref": "mem:21", "role": "supersedes"}]
    assert refs(both).index("mem:21") > refs(both).index("mem:4")  # the newer ranks higher
    # contradicts: both sides returned, each marked, no side picked
    marked = {m["ref"]: m for m in billing["messages"]}
    assert marked["mem:23"]["contradicts"] == ["mem:5"]
    assert marked["mem:5"]["contradicts"] == ["mem:23"]
    # supports changes nothing: both rows, neither marked
    supported = {m["ref"]: m for m in deploy["messages"]}
    for ref in ("mem:24", "mem:6"):
        assert "replaces" not in supported[ref] and "contradicts" not in supported[ref]


# --------------------------------------------------------------------------- declaring


async def test_declare_traverse_and_retract(connect: Any) -> None:
    async with connect() as tools:
        first = await store(tools, "Alice lives in Paris")
        rider = await tools(
            "store",
            {
                "agent_id": "a",
                "message": {"content": "Alice works at Acme"},
                "associations": {
                    "entities": [{"name": "Alice"}, {"name": "Acme Corp", "aliases": ["Acme"]}],
                    "relations": [{"subject": "Alice", "predicate": "Works_At", "object": "Acme"}],
                },
            },
        )
        declared = await tools(
            "declare_associations",
            {
                "agent_id": "a",
                "anchor_ref": f"mem:{first}",
                "associations": {
                    "entities": [{"name": "alice"}, {"name": "Paris"}, {"name": ""}],
                    "relations": [
                        {"subject": "Alice", "predicate": "lives in", "object": "Paris"},
                        {"subject": "mem:999999", "predicate": "supports", "object": "Paris"},
                    ],
                },
            },
        )
        walked = await tools("traverse", {"agent_id": "a", "entity": "ACME"})
        other = await tools("traverse", {"agent_id": "b", "entity": "acme"})
        gone = await tools(
            "declare_associations",
            {
                "agent_id": "a",
                "retract": {
                    "relations": [declared["relations"][0], 987654],
                    "mentions": [{"entity": 1, "ref": "bogus"}],
                },
            },
        )
        after = await tools("traverse", {"agent_id": "a", "entity": "alice"})
    assert rider["result"] == "stored"
    assoc = rider["associations"]
    assert [e["name"] for e in assoc["entities"]] == ["Alice", "Acme Corp"]
    assert all(e["created"] for e in assoc["entities"]) and assoc["mentions"] == 2
    assert declared["result"] == "declared" and declared["ok"] is True
    alice = declared["entities"][0]
    assert alice == {"id": assoc["entities"][0]["id"], "name": "alice", "created": False}
    assert declared["dropped"] == [
        {"item": "entities[2]", "reason": "name must be a nonempty string"},
        {"item": "relations[1].subject", "reason": "mem:999999 is not a record of this agent"},
    ]
    assert [e["name"] for e in walked["entities"]] == ["Acme Corp", "Alice"]
    assert walked["entities"][0]["aliases"] == ["Acme"]
    assert walked["relations"][0]["predicate"] == "works_at"  # stored normalized
    assert walked["relations"][0]["anchor_ref"] == f"mem:{rider['id']}"
    assert other["reason"] == "no_such_entity"
    assert gone["retracted"] == {"relations": 1, "mentions": 0}
    assert gone["dropped"] == [
        {"item": "retract.mentions[0]", "reason": "needs an integer entity and a record ref"}
    ]
    assert [e["name"] for e in after["entities"]] == ["Alice", "Acme Corp"]


async def test_a_deleted_memory_takes_its_declarations(connect: Any) -> None:
    async with connect() as tools:
        old = await store(tools, "The office is on floor 3")
        new = await store(
            tools,
            "The office moved to floor 5",
            associations={
                "entities": [{"name": "office"}],
                "relations": [{"subject": "mem:0", "predicate": "supersedes", "object": "x"}],
            },
        )
        await tools(
            "declare_associations",
            {
                "agent_id": "a",
                "associations": {
                    "relations": [
                        {"subject": f"mem:{new}", "predicate": "supersedes", "object": f"mem:{old}"}
                    ]
                },
            },
        )
        before = await tools("recall", {"agent_id": "a", "query": "office floor"})
        await tools("delete_memory", {"memory_id": new, "agent_id": "a"})
        walked = await tools("traverse", {"agent_id": "a", "entity": "office"})
        after = await tools("recall", {"agent_id": "a", "query": "office floor"})
    assert f"mem:{old}" not in refs(before) and f"mem:{new}" in refs(before)
    assert "mentions" not in walked["entities"][0]  # the mention went with the row
    assert f"mem:{old}" in refs(after)  # nothing replaces it any more


async def test_paused_declarations_write_nothing(connect: Any) -> None:
    async with connect() as tools:
        row = await store(tools, "Bob maintains billing")
        await tools("pause_persistence", {})
        skipped = await tools(
            "declare_associations",
            {
                "agent_id": "a",
                "anchor_ref": f"mem:{row}",
                "associations": {"entities": [{"name": "Bob"}]},
            },
        )
        await tools("resume_persistence", {})
        walked = await tools("traverse", {"agent_id": "a", "entity": "bob"})
    assert skipped["result"] == "skipped" and skipped["persisted"] is False
    assert walked["reason"] == "no_such_entity"


# --------------------------------------------------------------------------- recall


async def test_a_chain_resolves_to_its_newest_and_nothing_else_moves(connect: Any) -> None:
    ask = {"agent_id": "a", "query": "daily standup meeting", "limit": 5}
    async with connect() as tools:
        ids = []
        for hour in ("08:00", "08:30", "09:00"):
            ids.append(await store(tools, f"The daily standup meeting is at {hour}"))
        for k in range(6):
            await store(tools, f"The daily standup meeting room is number {k}")
        undeclared = await tools("recall", ask)
        for newer, older in ((ids[1], ids[0]), (ids[2], ids[1])):
            relation = {
                "subject": f"mem:{newer}",
                "predicate": "supersedes",
                "object": f"mem:{older}",
            }
            await tools(
                "declare_associations",
                {"agent_id": "a", "associations": {"relations": [relation]}},
            )
        plain = await tools("recall", ask)
        both = await tools("recall", {**ask, "include_superseded": True})
    older = {f"mem:{ids[0]}", f"mem:{ids[1]}"}
    assert older <= set(refs(undeclared))
    got = refs(plain)
    assert got[-1] == f"mem:{ids[2]}"
    assert set(got) == set(refs(undeclared)) - older
    best = plain["messages"][-1]
    assert {r["ref"] for r in best["replaces"]} == older
    marked = {m["ref"]: m for m in both["messages"]}
    assert set(marked) == set(refs(undeclared))
    for ref in older:
        assert marked[ref]["replaced_by"] == [{"ref": f"mem:{ids[2]}", "role": "supersedes"}]


@pytest.mark.parametrize("mode", ["rrf", "rsf", "cascade"])
@pytest.mark.parametrize("query", ["office door code", ""])
async def test_every_mode_and_the_blank_listing_replace_the_superseded_row(
    connect: Any, mode: str, query: str
) -> None:
    # The step runs on every list a mode ranks (the cascade's keyword list, ranked last for
    # the places left, and a blank query's newest-first listing included).
    ask = {"agent_id": "a", "query": query, "limit": 10, "deep": True}
    async with connect(recall_mode=mode) as tools:
        old = await store(tools, "The office door code is 4711")
        for k in range(3):
            await store(tools, f"The office printer on floor {k} needs toner")
        new = await store(tools, "The office door code changed to 0815")
        undeclared = await tools("recall", ask)
        relation = {"subject": f"mem:{new}", "predicate": "supersedes", "object": f"mem:{old}"}
        await tools(
            "declare_associations", {"agent_id": "a", "associations": {"relations": [relation]}}
        )
        plain = await tools("recall", ask)
        both = await tools("recall", {**ask, "include_superseded": True})
    assert {f"mem:{old}", f"mem:{new}"} <= set(refs(undeclared))
    assert f"mem:{new}" in refs(plain) and f"mem:{old}" not in refs(plain)
    assert set(refs(plain)) == set(refs(undeclared)) - {f"mem:{old}"}
    assert set(refs(both)) == set(refs(undeclared))
    marked = {m["ref"]: m for m in both["messages"]}
    assert marked[f"mem:{old}"]["replaced_by"] == [{"ref": f"mem:{new}", "role": "supersedes"}]


async def test_cross_scope_and_cyclic_declarations_hide_nothing(connect: Any) -> None:
    async with connect() as tools:
        here = await store(tools, "The build server is called atlas")
        elsewhere = await store(tools, "The build server is called zeus", project_id="p")
        a = await store(tools, "The release train leaves on Mondays")
        b = await store(tools, "The release train leaves on Fridays")
        rels = [
            {"subject": f"mem:{elsewhere}", "predicate": "supersedes", "object": f"mem:{here}"},
            {"subject": f"mem:{a}", "predicate": "supersedes", "object": f"mem:{b}"},
            {"subject": f"mem:{b}", "predicate": "corrects", "object": f"mem:{a}"},
        ]
        out = await tools(
            "declare_associations", {"agent_id": "a", "associations": {"relations": rels}}
        )
        build = await tools("recall", {"agent_id": "a", "query": "build server called"})
        train = await tools("recall", {"agent_id": "a", "query": "release train leaves"})
    assert len(out["relations"]) == 3
    assert f"mem:{here}" in refs(build) and f"mem:{elsewhere}" in refs(build)
    assert {f"mem:{a}", f"mem:{b}"} <= set(refs(train))


async def test_trace_says_why_each_row_came_back(connect: Any) -> None:
    async with connect() as tools:
        old = await store(tools, "The wifi password is hunter2")
        new = await store(tools, "The wifi password changed to correcthorse")
        for k in range(4):
            await store(tools, f"The guest wifi network number {k} is open")
        relation = {"subject": f"mem:{new}", "predicate": "corrects", "object": f"mem:{old}"}
        await tools(
            "declare_associations", {"agent_id": "a", "associations": {"relations": [relation]}}
        )
        ask = {"agent_id": "a", "query": "wifi password", "limit": 3}
        plain = await tools("recall", ask)
        traced = await tools("recall", {**ask, "trace": True})
    assert "trace" not in plain
    trace = traced["trace"]
    assert trace["trace_version"] == 1
    returned = refs(traced)
    assert list(reversed(returned)) == trace["order"]["before_cut"][: len(returned)]
    assert trace["order"]["limit"] == 3
    passed = {d["ref"] for d in trace["gate"]["decisions"] if d["passed"]}
    assert set(returned) <= passed
    for decision in trace["gate"]["decisions"]:
        assert set(decision) == {"ref", "signal", "score", "passed"}
    assert trace["supersession"]["replaced"] == [
        {"ref": f"mem:{old}", "by": [f"mem:{new}"], "role": "corrects"}
    ]
    arms = trace["arms"]
    assert f"mem:{old}" not in {row["ref"] for rows in arms.values() for row in rows}
    for rows in arms.values():
        assert [row["rank"] for row in rows] == list(range(len(rows)))
    assert "hunter2" not in json.dumps(trace)  # refs and scores, never stored text


async def test_store_lists_what_the_new_memory_could_supersede(connect: Any) -> None:
    async with connect() as tools:
        first = await tools(
            "store",
            {"agent_id": "a", "message": {"id": "standup-v1", "content": "Standup is at 10:00"}},
        )
        undeclared = await tools(
            "store",
            {"agent_id": "a", "message": {"id": "standup-v2", "content": "Standup moved to 09:30"}},
        )
        elsewhere = await store(tools, "The standup of the other team is at 11:00", project_id="p")
        same = await store(tools, "The deploy freeze starts on Friday at noon sharp")
        # Any declaration of a replacing role turns the help on for the agent.
        relation = {
            "subject": f"mem:{undeclared['id']}",
            "predicate": "supersedes",
            "object": f"mem:{first['id']}",
        }
        await tools(
            "declare_associations", {"agent_id": "a", "associations": {"relations": [relation]}}
        )
        third = await tools(
            "store",
            {"agent_id": "a", "message": {"id": "standup-v3", "content": "Standup moved to 09:45"}},
        )
        near = await tools(
            "store",
            {
                "agent_id": "a",
                "message": {"content": "The deploy freeze starts on Friday at noon sharp!"},
            },
        )
        other = await tools("store", {"agent_id": "b", "message": {"id": "x-v2", "content": "x"}})
        walked = await tools(
            "recall", {"agent_id": "a", "query": "standup", "include_superseded": True}
        )
    assert "supersede_candidates" not in undeclared  # no declarations yet: answer unchanged
    assert "supersede_candidates" not in other
    family = third["supersede_candidates"]
    assert [c["ref"] for c in family] == [f"mem:{undeclared['id']}", f"mem:{first['id']}"]
    assert {c["why"] for c in family} == {"msg_id_family"}
    assert f"mem:{elsewhere}" not in [c["ref"] for c in family]
    (close,) = near["supersede_candidates"]
    assert close["ref"] == f"mem:{same}" and close["why"] == "cosine" and close["cosine"] >= 0.9
    # Listing a candidate declares nothing.
    marked = {m["ref"]: m for m in walked["messages"]}
    assert "replaced_by" not in marked.get(f"mem:{undeclared['id']}", {})


@pytest.mark.parametrize("store_backend", ["sqlite"])
async def test_reconstruct_answers_2_6_14s_shape_with_the_correction_heading_its_item(
    connect: Any, tmp_path: Path
) -> None:
    expected = reference()["reconstruct_password"]["items"][0]
    db = copy_database(ASSOCIATIONS_DB, tmp_path / "memory.db")
    ask = {
        "agent_id": "alice",
        "query": "How often does the staging database password rotate?",
        "deep": True,
    }
    async with connect(db_path=str(db)) as tools:
        answer = await tools("reconstruct", ask)
        none = await tools("reconstruct", {**ask, "query": "zebra xylophone quantum"})
        zero = await tools("reconstruct", {**ask, "count": 0})
    assert set(answer) >= {"items", "effective_count", "returned_count"}
    assert answer["returned_count"] == len(answer["items"]) <= answer["effective_count"] == 10
    (item,) = [i for i in answer["items"] if {c["ref"] for c in i["claims"]} >= {"mem:2", "mem:20"}]
    assert set(item) == set(expected)  # content, head_ref, claims, independence_reason, ...
    assert item["head_ref"] == "mem:20"  # 2.6.14 headed it with the corrected mem:2
    assert item["claims"] == expected["claims"]  # newest first, the role on the older claim
    assert item["independence_reason"] == expected["independence_reason"]
    assert item["excerpts"] == [
        {"ref": "mem:2", "content": "The staging database password rotates every 30 days"}
    ]
    assert item["ranges"] == [[0, len(item["content"])]]
    heads = [i["head_ref"] for i in answer["items"]]
    assert "mem:2" not in heads and len(heads) == len(set(heads))
    assert none["items"] == [] and none["shortfall_reason"] == "no_relevant_evidence"
    assert zero["items"] == [] and zero["shortfall_reason"] == "count_zero"


async def test_traverse_lists_memories_and_episodes_that_mention_an_entity(connect: Any) -> None:
    async with connect() as tools:
        row = await store(tools, "Planning with Zoe about the launch")
        episode = await tools(
            "archive_episode", {"agent_id": "a", "summary": "Launch review with Zoe"}
        )
        for ref in (f"ep:{episode['episode_id']}", f"mem:{row}"):
            await tools(
                "declare_associations",
                {
                    "agent_id": "a",
                    "anchor_ref": ref,
                    "associations": {"entities": [{"name": "Zoe"}]},
                },
            )
        walked = await tools("traverse", {"agent_id": "a", "entity": "zoe", "limit": 1})
        full = await tools("traverse", {"agent_id": "a", "entity": "zoe"})
        filtered = await tools(
            "traverse", {"agent_id": "a", "entity": "zoe", "source_id": "nobody"}
        )
    (zoe,) = full["entities"]
    assert sorted(zoe["mentions"]) == sorted([f"mem:{row}", f"ep:{episode['episode_id']}"])
    assert len(walked["entities"][0]["mentions"]) == 1
    assert walked["entities"][0]["mentions_omitted"] == 1 and walked["bounds"] == {
        "omitted": ["limit"]
    }
    assert "mentions" not in filtered["entities"][0]  # no memory of that source; no episodes
