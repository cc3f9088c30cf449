"""Contract 5 seen from recall: a skipped store never becomes a second recalled row.

A re-store under an existing msg_id (with changed content, or in another channel) and a
re-store of identical content are skipped; recall keeps returning the one stored row, with the
caller's msg_id as `id`. Spec: contracts §5, retrieval.md §3.2.
"""

from __future__ import annotations

import pytest
from support.mcp_client import AGENT

pytestmark = pytest.mark.anyio


async def _store(t, content: str, msg_id: str = "", **kw) -> dict:
    message = {"content": content}
    if msg_id:
        message["id"] = msg_id
    return await t("store", {"agent_id": AGENT, "message": message, **kw})


async def test_changed_content_under_the_same_msg_id_is_not_recalled(tools):
    first = await _store(tools, "the staging database password rotates monthly", "m-1")
    again = await _store(tools, "the staging database password rotates weekly", "m-1")
    assert again["result"] == "skipped" and again["id"] == first["id"]
    for query in (
        "staging database password rotates weekly",
        "the staging database password rotates monthly",
    ):
        messages = await tools.messages(query, deep=True)
        assert [m["content"] for m in messages] == ["the staging database password rotates monthly"]
        assert messages[0]["id"] == "m-1" and messages[0]["ref"] == f"mem:{first['id']}"


async def test_msg_id_in_another_channel_is_skipped_and_recalled_once(tools):
    first = await _store(tools, "badge office moved to floor three", "m-2", channel="c1")
    again = await _store(tools, "badge office moved to floor three", "m-2", channel="c2")
    assert again["result"] == "skipped" and again["id"] == first["id"]
    assert len(await tools.messages("badge office moved", deep=True)) == 1
    # The one row lives in c1: a c2 recall does not see it.
    assert await tools.messages("badge office moved", deep=True, channel="c2") == []
    assert len(await tools.messages("badge office moved", deep=True, channel="c1")) == 1


async def test_identical_content_is_recalled_once_but_other_channels_keep_their_copy(tools):
    await _store(tools, "wifi password is on the fridge", channel="hall")
    skipped = await _store(tools, "wifi password is on the fridge", channel="hall")
    assert skipped["result"] == "skipped"
    assert len(await tools.messages("wifi password fridge", deep=True)) == 1
    other = await _store(tools, "wifi password is on the fridge", channel="kitchen")
    assert other["result"] == "stored"
    both = await tools.messages("wifi password fridge", deep=True)
    assert len(both) == 2 and len({m["ref"] for m in both}) == 2


async def test_a_reused_msg_id_after_deletion_is_a_new_row(tools):
    first = await _store(tools, "printer toner is in cabinet b", "m-3")
    await tools("delete_memory", {"memory_id": first["id"], "agent_id": AGENT})
    assert await tools.messages("printer toner cabinet", deep=True) == []
    second = await _store(tools, "printer toner is in cabinet c", "m-3")
    assert second["result"] == "stored"
    messages = await tools.messages("printer toner cabinet", deep=True)
    assert [(m["content"], m["id"]) for m in messages] == [("printer toner is in cabinet c", "m-3")]
