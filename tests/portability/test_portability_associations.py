"""Declared associations (issue 32) travel with their records: an export carries them (2.6's
entity / mention / relation records), an import and a merge re-point them at the rows they
wrote, and delete_agent_data takes them with the agent. Through a real MCP client, on both
backends."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from support.mcp_client import Tools

pytestmark = pytest.mark.anyio


async def declared_store(tools: Tools, agent: str) -> tuple[int, int]:
    old = await tools(
        "store", {"agent_id": agent, "message": {"content": "The VPN gateway is vpn1"}}
    )
    new = await tools(
        "store",
        {
            "agent_id": agent,
            "message": {"content": "The VPN gateway moved to vpn2"},
            "associations": {
                "entities": [{"name": "VPN gateway", "aliases": ["gateway"]}],
                "relations": [
                    {"subject": f"mem:{0}", "predicate": "supersedes", "object": "x"},
                ],
            },
        },
    )
    out = await tools(
        "declare_associations",
        {
            "agent_id": agent,
            "associations": {
                "relations": [
                    {
                        "subject": f"mem:{new['id']}",
                        "predicate": "supersedes",
                        "object": f"mem:{old['id']}",
                    },
                    {"subject": "VPN gateway", "predicate": "runs_on", "object": "edge cluster"},
                ]
            },
        },
    )
    assert len(out["relations"]) == 2, out
    return int(old["id"]), int(new["id"])


def walked(answer: dict[str, Any]) -> set[tuple[str, str, str]]:
    names = {e["id"]: e["name"] for e in answer["entities"]}
    return {(names[r["subject"]], r["predicate"], names[r["object"]]) for r in answer["relations"]}


async def test_export_import_carries_declarations_to_the_new_rows(
    connect: Any, export_dir: Path
) -> None:
    async with connect() as tools:
        old, new = await declared_store(tools, "alice")
        exported = await tools("export_memories", {"agent_id": "alice", "output_path": "a.jsonl"})
        preview = await tools(
            "import_memories", {"input_path": "a.jsonl", "target_agent_id": "bob", "dry_run": True}
        )
        imported = await tools(
            "import_memories", {"input_path": "a.jsonl", "target_agent_id": "bob"}
        )
        graph = await tools("traverse", {"agent_id": "bob", "entity": "gateway"})
        recalled = await tools("recall", {"agent_id": "bob", "query": "VPN gateway"})
    assert exported["associations"] == {"entities": 2, "mentions": 1, "relations": 2}
    lines = [json.loads(x) for x in (export_dir / "a.jsonl").read_text().splitlines()]
    kinds = [x["_type"] for x in lines]
    assert kinds[-5:] == ["entity", "entity", "mention", "relation", "relation"]
    assert lines[0]["relation_count"] == 2
    assert preview["associations"] == {"entities": 2, "mentions": 1, "relations": 2, "dropped": 0}
    assert imported["associations"] == preview["associations"]
    assert walked(graph) == {("VPN gateway", "runs_on", "edge cluster")}
    (mention,) = graph["entities"][0]["mentions"]
    assert mention not in (f"mem:{old}", f"mem:{new}")  # bob's own row, not alice's id
    texts = [m["content"] for m in recalled["messages"]]
    assert "The VPN gateway moved to vpn2" in texts and "The VPN gateway is vpn1" not in texts


async def test_merge_moves_declarations_and_delete_takes_them(connect: Any) -> None:
    async with connect() as tools:
        await declared_store(tools, "alice")
        merged = await tools(
            "merge_memories",
            {"source_agent_id": "alice", "target_agent_id": "carol", "mode": "move"},
        )
        at_target = await tools("traverse", {"agent_id": "carol", "entity": "VPN gateway"})
        at_source = await tools("traverse", {"agent_id": "alice", "entity": "VPN gateway"})
        recalled = await tools("recall", {"agent_id": "carol", "query": "VPN gateway"})
        await tools("delete_agent_data", {"agent_id": "carol"})
        gone = await tools("traverse", {"agent_id": "carol", "entity": "VPN gateway"})
        db = tools._engine().db  # what no tool lists: the rows of the declaration tables
        left = {t: db.query(f"SELECT COUNT(*) FROM {t}")[0][0] for t in ("entities", "relations")}
    assert merged["associations"] == {"entities": 2, "mentions": 1, "relations": 2, "dropped": 0}
    assert walked(at_target) == {("VPN gateway", "runs_on", "edge cluster")}
    assert at_source["reason"] == "no_such_entity"
    texts = [m["content"] for m in recalled["messages"]]
    assert "The VPN gateway moved to vpn2" in texts and "The VPN gateway is vpn1" not in texts
    assert gone["reason"] == "no_such_entity"
    assert left == {"entities": 0, "relations": 0}
